# Peer anchor for the GPU engine's mixture-of-experts speed: the synthetic shapes of
# benchmarks/cuda_moe_bench.cpp (OLMoE-1B-7B: 16 layers, 64 experts of 1024, top-8; Qwen3-30B-A3B:
# 48 layers, 128 experts of 768, top-8, renormalised; hidden 2048, q/k head norms), random bf16
# weights, written the way a library-kernel engine runs it: bf16 activations and KV, fused qkv
# and per-expert [gate; up] weights, cuBLAS GEMMs, the experts through torch._grouped_mm (one
# grouped GEMM for all experts, device-side offsets from a device-side sort; a per-expert loop
# with --loop, eager), torch SDPA (flash) attention, F.rms_norm, decode steps replayed from CUDA
# graphs. No custom kernels: a LOWER bound of what vLLM/SGLang reach on the card.
# Prints one "RESULT model case ms" line per row: decode at batch 1, 64, 256 (context 512,
# greedy token of every row) and one 2048-token prompt prefilled (last row's token).
# Usage (a GPU machine, python3 with torch): python3 scripts/gpu/peer_torch_moe.py
#   [--models olmoe-1b-7b,qwen3-30b-a3b] [--batches 1,64,256] [--context 512] [--prefill 2048]
#   [--loop] [out.json]      (scripts/gpu/moe_gpu.sh runs it beside cuda_moe_bench)
import argparse, json, time
import torch
import torch.nn.functional as F

dev, dt = "cuda", torch.bfloat16
SHAPES = {  # layers, hidden, q heads, kv heads, head dim, experts, expert width, top-k, renorm, vocab, rope theta, eps
    "olmoe-1b-7b": dict(L=16, D=2048, H=16, KVH=16, HD=128, E=64, F=1024, K=8, renorm=False,
                        V=50304, theta=10000.0, eps=1e-5),
    "qwen3-30b-a3b": dict(L=48, D=2048, H=32, KVH=4, HD=128, E=128, F=768, K=8, renorm=True,
                          V=151936, theta=1000000.0, eps=1e-6),
}

ap = argparse.ArgumentParser()
ap.add_argument("--models", default="olmoe-1b-7b,qwen3-30b-a3b")
ap.add_argument("--batches", default="1,64,256")
ap.add_argument("--context", type=int, default=512)
ap.add_argument("--prefill", type=int, default=2048)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--loop", action="store_true", help="experts as a per-expert loop (eager)")
ap.add_argument("out", nargs="?")
args = ap.parse_args()


def rnd(*s, scale=0.04):
    return (torch.rand(*s, device=dev, dtype=dt) - 0.5) * scale


class Model:
    def __init__(self, name):
        self.name = name
        for k, v in SHAPES[name].items():
            setattr(self, k, v)
        D, H, KVH, HD, E, Fe = self.D, self.H, self.KVH, self.HD, self.E, self.F
        torch.manual_seed(0)
        # Experts stored (E, out, in) as checkpoints hold them; the grouped GEMM reads their
        # transposed views (column-major B, the layout torch._grouped_mm's sm90 kernel wants).
        self.layers = [dict(qkv=rnd(D, (H + 2 * KVH) * HD), o=rnd(H * HD, D),
                            qn=torch.ones(HD, device=dev, dtype=dt),
                            kn=torch.ones(HD, device=dev, dtype=dt),
                            router=rnd(D, E, scale=1.0),
                            gu=rnd(E, 2 * Fe, D), down=rnd(E, D, Fe),
                            n1=torch.ones(D, device=dev, dtype=dt),
                            n2=torch.ones(D, device=dev, dtype=dt)) for _ in range(self.L)]
        self.emb, self.lm = rnd(self.V, D), rnd(D, self.V)
        self.nf = torch.ones(D, device=dev, dtype=dt)
        self.inv_freq = 1.0 / (self.theta ** (torch.arange(0, HD, 2, device=dev,
                                                           dtype=torch.float32) / HD))

    def rope(self, x, pos):  # x (T, h, HD); pos (T,)
        HD = self.HD
        ang = pos.float()[:, None] * self.inv_freq[None, :]
        c, s = ang.cos()[:, None, :].to(dt), ang.sin()[:, None, :].to(dt)
        x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    def experts(self, a, w):
        """a (T, D): softmax router, top-k, grouped SwiGLU experts, weighted sum."""
        T, K, E = a.shape[0], self.K, self.E
        probs = (a @ w["router"]).float().softmax(-1)
        topw, topi = probs.topk(K, dim=-1)
        if self.renorm:
            topw = topw / topw.sum(-1, keepdim=True)
        flat = topi.reshape(-1)
        if args.loop:  # per-expert cuBLAS GEMMs over each expert's rows (host-side indexing)
            ys = torch.empty(T * K, self.D, device=dev, dtype=dt)
            for e in flat.unique().tolist():
                idx = (flat == e).nonzero().squeeze(1)
                g, u = (a[idx // K] @ w["gu"][e].t()).chunk(2, dim=-1)
                ys[idx] = (F.silu(g) * u) @ w["down"][e].t()
        else:
            order = flat.argsort(stable=True)  # (token, rank) pairs grouped by expert
            counts = torch.zeros(E, device=dev, dtype=torch.int32).scatter_add_(
                0, flat, torch.ones_like(flat, dtype=torch.int32))
            offs = counts.cumsum(0, dtype=torch.int32)
            xs = a[order // K]
            g, u = torch._grouped_mm(xs, w["gu"].transpose(-2, -1), offs=offs).chunk(2, dim=-1)
            ysg = torch._grouped_mm(F.silu(g) * u, w["down"].transpose(-2, -1), offs=offs)
            ys = torch.empty_like(ysg).index_copy_(0, order, ysg)
        return (ys.view(T, K, self.D).float() * topw[..., None]).sum(1).to(dt)

    def attn_qkv(self, a, w, p):
        T, H, KVH, HD = a.shape[0], self.H, self.KVH, self.HD
        q, k, v = (a @ w["qkv"]).split([H * HD, KVH * HD, KVH * HD], dim=-1)
        q = F.rms_norm(q.view(T, H, HD), (HD,), w["qn"], self.eps)
        k = F.rms_norm(k.view(T, KVH, HD), (HD,), w["kn"], self.eps)
        return self.rope(q, p), self.rope(k, p), v.reshape(T, KVH, HD)

    def decode_step(self, tok, pos, kc, vc, ctx):
        B, D, H, HD = tok.shape[0], self.D, self.H, self.HD
        h = self.emb[tok]
        p = torch.full((B,), pos, device=dev, dtype=torch.int64)
        for i, w in enumerate(self.layers):
            q, k, v = self.attn_qkv(F.rms_norm(h, (D,), w["n1"], self.eps), w, p)
            kc[i][:, :, pos] = k
            vc[i][:, :, pos] = v
            o = F.scaled_dot_product_attention(q.view(B, H, 1, HD), kc[i][:, :, :ctx],
                                               vc[i][:, :, :ctx], enable_gqa=True)
            h = h + o.reshape(B, H * HD) @ w["o"]
            h = h + self.experts(F.rms_norm(h, (D,), w["n2"], self.eps), w)
        return (F.rms_norm(h, (D,), self.nf, self.eps) @ self.lm).argmax(-1)

    def prefill(self, tok):  # tok (T,): one causal prompt, returns the last position's argmax
        T, D, H, KVH, HD = tok.shape[0], self.D, self.H, self.KVH, self.HD
        h = self.emb[tok]
        p = torch.arange(T, device=dev)
        for w in self.layers:
            q, k, v = self.attn_qkv(F.rms_norm(h, (D,), w["n1"], self.eps), w, p)
            o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                               v.transpose(0, 1)[None], is_causal=True,
                                               enable_gqa=True)
            h = h + o[0].transpose(0, 1).reshape(T, H * HD) @ w["o"]
            h = h + self.experts(F.rms_norm(h, (D,), w["n2"], self.eps), w)
        return (F.rms_norm(h[-1:], (D,), self.nf, self.eps) @ self.lm).argmax(-1)


def timed(fn, n):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e3


out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
       "experts": "loop" if args.loop else "torch._grouped_mm", "rows": []}
print(f"# peer on {out['device']}, torch {out['torch']}, experts: {out['experts']}", flush=True)
with torch.inference_mode():
    for name in args.models.split(","):
        m = Model(name)
        ctx = args.context
        for B in [int(b) for b in args.batches.split(",")]:
            kc = [torch.zeros(B, m.KVH, ctx + 1, m.HD, device=dev, dtype=dt) for _ in range(m.L)]
            vc = [torch.zeros(B, m.KVH, ctx + 1, m.HD, device=dev, dtype=dt) for _ in range(m.L)]
            tok = torch.randint(0, m.V, (B,), device=dev)
            step = lambda: m.decode_step(tok, ctx, kc, vc, ctx + 1)
            for _ in range(2):
                step()
            how = "eager"
            if not args.loop:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    step()
                step, how = g.replay, "graph"
                for _ in range(3):
                    step()
            ms = timed(step, args.steps)
            r = dict(model=name, case=f"decode_b{B}", ms=round(ms, 4), how=how)
            out["rows"].append(r)
            print(f"RESULT {name} decode_b{B} {ms:.4f}", flush=True)
            del kc, vc
            torch.cuda.empty_cache()
        if args.prefill > 0:
            tok = torch.randint(0, m.V, (args.prefill,), device=dev)
            m.prefill(tok)
            ms = timed(lambda: m.prefill(tok), max(1, args.steps // 4))
            out["rows"].append(dict(model=name, case=f"prefill_{args.prefill}", ms=round(ms, 3),
                                    how="eager"))
            print(f"RESULT {name} prefill_{args.prefill} {ms:.4f}", flush=True)
        del m
        torch.cuda.empty_cache()

if args.out:
    json.dump(out, open(args.out, "w"), indent=1)
