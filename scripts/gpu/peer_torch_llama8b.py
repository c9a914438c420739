# Peer anchor for the GPU engine's absolute speed: Llama-3.1-8B (random bf16 weights) written the
# way a library-kernel engine runs it -- bf16 activations and KV, fused qkv and gate_up weights,
# cuBLAS GEMMs, torch SDPA (flash) attention, F.rms_norm, decode steps replayed from CUDA graphs.
# No custom kernels, no fusion beyond that: a LOWER bound of what vLLM/SGLang reach on the card.
# Prints per-step decode ms at several (batch, context) and prefill tok/s, plus the roofline.
# Usage (a GPU machine, python3 with torch): python3 scripts/gpu/peer_torch_llama8b.py [out.json]
# (scripts/gpu/vs_peer.sh runs it beside cuda_e2e_bench and prints ours ÷ peer.)
import json, sys, time
import torch
import torch.nn.functional as F

dev, dt = "cuda", torch.bfloat16
L, D, H, KVH, HD, FF, V = 32, 4096, 32, 8, 128, 14336, 128256
torch.manual_seed(0)


def rnd(*s):
    return (torch.rand(*s, device=dev, dtype=dt) - 0.5) * 0.04


layers = [dict(qkv=rnd(D, (H + 2 * KVH) * HD), o=rnd(H * HD, D), gu=rnd(D, 2 * FF),
               down=rnd(FF, D), n1=torch.ones(D, device=dev, dtype=dt),
               n2=torch.ones(D, device=dev, dtype=dt)) for _ in range(L)]
emb, lm, nf = rnd(V, D), rnd(D, V), torch.ones(D, device=dev, dtype=dt)
inv_freq = 1.0 / (500000.0 ** (torch.arange(0, HD, 2, device=dev, dtype=torch.float32) / HD))
weight_bytes = sum(t.numel() * 2 for w in layers for t in w.values()) + emb.numel() * 2 + lm.numel() * 2


def rope(x, pos):  # x (T, h, HD); pos (T,)
    ang = pos.float()[:, None] * inv_freq[None, :]
    c, s = ang.cos()[:, None, :].to(dt), ang.sin()[:, None, :].to(dt)
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def decode_step(tok, pos, kc, vc, ctx):
    """tok (B,), all sequences at position pos (ctx = pos + 1 cached positions)."""
    B = tok.shape[0]
    h = emb[tok]
    p = torch.full((B,), pos, device=dev, dtype=torch.int64)
    for i, w in enumerate(layers):
        a = F.rms_norm(h, (D,), w["n1"], 1e-5)
        qkv = a @ w["qkv"]
        q, k, v = qkv.split([H * HD, KVH * HD, KVH * HD], dim=-1)
        q, k = rope(q.view(B, H, HD), p), rope(k.view(B, KVH, HD), p)
        kc[i][:, :, pos] = k
        vc[i][:, :, pos] = v.view(B, KVH, HD)
        o = F.scaled_dot_product_attention(q.view(B, H, 1, HD), kc[i][:, :, :ctx], vc[i][:, :, :ctx],
                                           enable_gqa=True)
        h = h + o.reshape(B, H * HD) @ w["o"]
        a = F.rms_norm(h, (D,), w["n2"], 1e-5)
        g, u = (a @ w["gu"]).chunk(2, dim=-1)
        h = h + (F.silu(g) * u) @ w["down"]
    return (F.rms_norm(h, (D,), nf, 1e-5) @ lm).argmax(-1)


def prefill(tok):  # tok (B, T): whole causal prefill, returns last-position argmax
    B, T = tok.shape
    h = emb[tok].view(B * T, D)
    p = torch.arange(T, device=dev).repeat(B)
    for w in layers:
        a = F.rms_norm(h, (D,), w["n1"], 1e-5)
        q, k, v = (a @ w["qkv"]).split([H * HD, KVH * HD, KVH * HD], dim=-1)
        q, k = rope(q.view(B * T, H, HD), p), rope(k.view(B * T, KVH, HD), p)
        q = q.view(B, T, H, HD).transpose(1, 2)
        k = k.view(B, T, KVH, HD).transpose(1, 2)
        v = v.reshape(B, T, KVH, HD).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        h = h + o.transpose(1, 2).reshape(B * T, H * HD) @ w["o"]
        a = F.rms_norm(h, (D,), w["n2"], 1e-5)
        g, u = (a @ w["gu"]).chunk(2, dim=-1)
        h = h + (F.silu(g) * u) @ w["down"]
    last = h.view(B, T, D)[:, -1]
    return (F.rms_norm(last, (D,), nf, 1e-5) @ lm).argmax(-1)


def copy_rate():
    a = torch.empty(4 << 30, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
    r = 2 * a.numel() * 10 / (time.perf_counter() - t)
    del a, b
    torch.cuda.empty_cache()
    return r


out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
       "weight_bytes": weight_bytes, "decode": [], "prefill": []}
bw = copy_rate()
out["copy_Bps"] = bw
print(f"copy {bw / 1e12:.2f} TB/s; weights {weight_bytes / 1e9:.2f} GB", flush=True)

with torch.inference_mode():
    for B, ctx in [(1, 512), (1, 2048), (8, 512), (64, 512), (64, 2048), (256, 512), (256, 2048)]:
        try:  # a case whose KV does not fit beside the weights (256 x 2048 on 80 GB) is skipped
            kc = [torch.zeros(B, KVH, ctx, HD, device=dev, dtype=dt) for _ in range(L)]
            vc = [torch.zeros(B, KVH, ctx, HD, device=dev, dtype=dt) for _ in range(L)]
        except torch.OutOfMemoryError:
            kc = vc = None
            torch.cuda.empty_cache()
            print(f"decode batch {B} context {ctx}: skipped, its KV does not fit", flush=True)
            out.setdefault("skipped", []).append(dict(batch=B, context=ctx))
            continue
        for c in kc + vc:
            c.normal_(0, 1)
        tok = torch.randint(0, V, (B,), device=dev)
        for _ in range(2):
            decode_step(tok, ctx - 1, kc, vc, ctx)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            nxt = decode_step(tok, ctx - 1, kc, vc, ctx)
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        n = 20
        t = time.perf_counter()
        for _ in range(n):
            g.replay()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t) / n * 1e3
        kv_bytes = 2 * L * B * ctx * KVH * HD * 2
        roof = (weight_bytes + kv_bytes) / bw * 1e3
        r = dict(batch=B, context=ctx, ms=round(ms, 3), tok_s=round(B / ms * 1e3, 1),
                 roofline_ms=round(roof, 3), pct_roofline=round(100 * roof / ms, 1))
        out["decode"].append(r)
        print("decode", r, flush=True)
        del kc, vc, g
        torch.cuda.empty_cache()

    for B, T in [(1, 512), (1, 2048), (1, 4096), (4, 1024), (16, 512)]:
        tok = torch.randint(0, V, (B, T), device=dev)
        for _ in range(2):
            prefill(tok)
        torch.cuda.synchronize()
        n = 5
        t = time.perf_counter()
        for _ in range(n):
            prefill(tok)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t) / n * 1e3
        flops = 2 * (weight_bytes / 2 - emb.numel()) * B * T + 4 * L * H * HD * B * T * T / 2
        r = dict(batch=B, tokens=T, ms=round(ms, 2), tok_s=round(B * T / ms * 1e3, 0),
                 tflops=round(flops / ms / 1e9, 0))
        out["prefill"].append(r)
        print("prefill", r, flush=True)

if len(sys.argv) > 1:
    json.dump(out, open(sys.argv[1], "w"), indent=1)
