#!/usr/bin/env python3
"""Our paged attention against torch's scaled_dot_product_attention, measured in one run.

Llama-3.1-8B heads (32 query / 8 KV, head_dim 128). Prefill: causal, one sequence of L tokens
(and a batch of 4 × 1024). Decode: one query token per sequence at context 2048, batch 1…256.
Our times come from bench/cuda_attention_bench --prefill-csv/--decode-csv (paged KV in fp32,
blocks of 16 scattered, fp32 CUDA-core math, invariant); torch's from CUDA events around
F.scaled_dot_product_attention on dense tensors, with the flash backend forced
(torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)) in bf16 and fp16, plus the
memory-efficient backend in fp32 (the closest to our numerics). Prints markdown tables.
The point is an honest measured ratio, not speed: ours runs on CUDA cores in fp32.

Usage (GPU machine, python3 with torch only): scripts/gpu/attention_vs_torch.py BENCH_BINARY
"""
import argparse
import csv
import io
import subprocess
import sys

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
PREFILL = [(1, 512), (1, 1024), (1, 2048), (1, 4096), (4, 1024)]  # (batch, L)
DECODE_BATCHES = [1, 8, 64, 256]
DECODE_CONTEXT = 2048


def ours(binary):
    """{(kind, batch, q_len, context): µs} from the bench's CSV mode."""
    args = [binary,
            "--prefill-csv", ",".join(f"{b}x{n}" if b > 1 else str(n) for b, n in PREFILL),
            "--decode-csv", ",".join(map(str, DECODE_BATCHES)),
            "--context", str(DECODE_CONTEXT)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    lines = [l for l in out.splitlines() if l.startswith("kind,") or l.startswith(("prefill,", "decode,"))]
    if len(lines) < 2:
        raise RuntimeError(f"{binary} printed no CSV rows:\n{out}")
    res = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines))):
        assert (int(r["heads"]), int(r["kv_heads"]), int(r["head_dim"])) == (HEADS, KV_HEADS, HEAD_DIM)
        res[(r["kind"], int(r["batch"]), int(r["q_len"]), int(r["context"]))] = float(r["us"])
    return res


def time_us(fn, torch, iters=None):
    """Median over 5 repetitions of the mean time per call between CUDA events."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if iters is None:  # aim at ~20 ms per repetition
        start.record(); fn(); end.record(); torch.cuda.synchronize()
        iters = int(min(1000, max(3, 20.0 / max(start.elapsed_time(end), 1e-3))))
    reps = []
    for _ in range(5):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        reps.append(start.elapsed_time(end) * 1e3 / iters)
    return sorted(reps)[2]


def sdpa_call(torch, backend, dtype, batch, q_len, ctx, causal):
    """(closure running one SDPA call, how) — to be called inside sdpa_kernel(backend) — or
    (None, why) when this backend refuses both forms."""
    F = torch.nn.functional
    from torch.nn.attention import sdpa_kernel
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, HEADS, q_len, HEAD_DIM, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(batch, KV_HEADS, ctx, HEAD_DIM, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(batch, KV_HEADS, ctx, HEAD_DIM, device="cuda", dtype=dtype, generator=g)

    def gqa():
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    def repeated():  # no GQA in this kernel: K/V repeated to 32 heads (same FLOPs, more bytes)
        r = HEADS // KV_HEADS
        kr, vr = k.repeat_interleave(r, 1), v.repeat_interleave(r, 1)
        return lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=causal)

    errors = []
    for how, make in (("enable_gqa", gqa), ("kv repeated", repeated)):
        try:
            f = make()
            with sdpa_kernel(backend):
                f()
            torch.cuda.synchronize()
            return f, how
        except Exception as e:  # this backend refuses this form: try the next
            msg = str(e).strip().splitlines()
            errors.append(f"{how}: {msg[0][:120] if msg else type(e).__name__}")
    return None, "; ".join(errors)


def prefill_flop(batch, n):
    return 4.0 * HEADS * HEAD_DIM * n * (n + 1) / 2 * batch  # causal: QKᵀ and PV, lower triangle


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", help="path of bench/cuda_attention_bench")
    a = ap.parse_args()
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as e:
        print(f"attention_vs_torch: torch (with torch.nn.attention) not importable here ({e}): skipped")
        return 0
    if not torch.cuda.is_available():
        print("attention_vs_torch: torch sees no CUDA device: skipped")
        return 0
    ours_us = ours(a.bench)
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"heads {HEADS} q / {KV_HEADS} kv, head_dim {HEAD_DIM}. Ours: paged KV in **fp32** (blocks of 16, "
          "scattered), fp32 math on CUDA cores, invariant. Torch: dense tensors in the dtype shown.")
    print("ratio = ours µs ÷ torch µs (how many times faster torch is; < 1: ours faster).\n")
    configs = [("flash", SDPBackend.FLASH_ATTENTION, torch.bfloat16, "bf16"),
               ("flash", SDPBackend.FLASH_ATTENTION, torch.float16, "fp16"),
               ("mem-efficient", SDPBackend.EFFICIENT_ATTENTION, torch.float32, "fp32")]
    for name, backend, dtype, dname in configs:
        print(f"### Prefill (causal), torch SDPA {name} {dname} vs ours fp32\n")
        print("| batch × L | ours µs | torch µs | ours TFLOP/s | torch TFLOP/s | ratio torch/ours (speed) | torch call |")
        print("|---|---|---|---|---|---|---|")
        for b, n in PREFILL:
            mine = ours_us[("prefill", b, n, n)]
            fn, how = sdpa_call(torch, backend, dtype, b, n, n, True)
            flop = prefill_flop(b, n)
            if fn is None:
                print(f"| {b} × {n} | {mine:.1f} | — | {flop / mine * 1e-6:.2f} | — | — | refused: {how} |")
                continue
            with sdpa_kernel(backend):
                t = time_us(fn, torch)
            print(f"| {b} × {n} | {mine:.1f} | {t:.1f} | {flop / mine * 1e-6:.2f} | {flop / t * 1e-6:.1f} "
                  f"| {mine / t:.1f} | {how} |")
            del fn
            torch.cuda.empty_cache()
        print()
    for name, backend, dtype, dname in configs[:1] + configs[2:]:
        bytes_el = 2 if dtype != torch.float32 else 4
        print(f"### Decode (q_len 1, context {DECODE_CONTEXT}), torch SDPA {name} {dname} vs ours fp32\n")
        print("| batch | ours µs | torch µs | ours KV TB/s (fp32) | torch KV TB/s | ratio torch/ours (speed) | torch call |")
        print("|---|---|---|---|---|---|---|")
        for b in DECODE_BATCHES:
            mine = ours_us[("decode", b, 1, DECODE_CONTEXT)]
            kv_elems = 2.0 * b * DECODE_CONTEXT * KV_HEADS * HEAD_DIM
            fn, how = sdpa_call(torch, backend, dtype, b, 1, DECODE_CONTEXT, False)
            if fn is None:
                print(f"| {b} | {mine:.1f} | — | {kv_elems * 4 / mine * 1e-6:.2f} | — | — | refused: {how} |")
                continue
            with sdpa_kernel(backend):
                t = time_us(fn, torch)
            print(f"| {b} | {mine:.1f} | {t:.1f} | {kv_elems * 4 / mine * 1e-6:.2f} | "
                  f"{kv_elems * bytes_el / t * 1e-6:.2f} | {mine / t:.2f} | {how} |")
            del fn
            torch.cuda.empty_cache()
        print()
    print("Torch's decode reads dense KV (the KV TB/s counts its dtype's bytes, 32-head copies when "
          "repeated are not counted); ours gathers fp32 KV through a block table.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
