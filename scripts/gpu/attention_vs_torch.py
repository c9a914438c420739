#!/usr/bin/env python3
"""Our paged attention against torch's flash scaled_dot_product_attention, measured in one run.

Llama-3.1-8B heads (32 query / 8 KV, head_dim 128). Prefill: causal, one sequence of L tokens
(512, 2k, 8k, 16k) and one step of mixed lengths (512 + 2048 + 8192 + 1000; torch: the sum of
one call per sequence, as it has no paged varlen form). Decode: one query token per sequence,
batch 1, 8, 64, 256 at context 512, 2k, 8k, 32k. Ours from benchmarks/cuda_attention_bench's CSV mode:
paged KV (blocks of 16, scattered), invariant, over a bf16 KV cache (tensor cores,
attention_tc.cu: the CUDA default) and over fp32 KV (CUDA cores, attention.cu); torch from CUDA
events around F.scaled_dot_product_attention on dense bf16 tensors with the flash backend
forced (torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)). Prints markdown tables
with TFLOP/s (prefill), TB/s of KV read (decode) and the ratio ours ÷ torch in speed
(> 1: ours faster).

Usage (GPU machine, python3 with torch only): scripts/gpu/attention_vs_torch.py BENCH_BINARY
[--prefill-only] (only the prefill table, ours over bf16 KV: a minute instead of several)
[--bf16-only] (both tables, ours over bf16 KV only: the fp32 KV columns, the slow part, show —)
"""
import argparse
import csv
import io
import subprocess
import sys

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
PREFILL = [512, 2048, 8192, 16384]
MIXED = [512, 2048, 8192, 1000]
DECODE_BATCHES = [1, 8, 64, 256]
DECODE_CONTEXTS = [512, 2048, 8192, 32768]


def ours(binary, kv_dtype, prefill_only=False):
    """{(kind, batch, q_len, context): µs} from the bench's CSV mode."""
    args = [binary, "--kv-dtype", kv_dtype,
            "--prefill-csv", ",".join(map(str, PREFILL)),
            "--mixed-csv", "+".join(map(str, MIXED))]
    if not prefill_only:
        args += ["--decode-csv", ",".join(f"{b}x{c}" for b in DECODE_BATCHES for c in DECODE_CONTEXTS)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    lines = [l for l in out.splitlines() if l.startswith(("kind,", "prefill,", "decode,", "mixed,"))]
    if len(lines) < 2:
        raise RuntimeError(f"{binary} printed no CSV rows:\n{out}")
    res = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines))):
        assert (int(r["heads"]), int(r["kv_heads"]), int(r["head_dim"])) == (HEADS, KV_HEADS, HEAD_DIM)
        assert r["kv_dtype"] == kv_dtype
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


def torch_us(torch, backend, dtype, batch, q_len, ctx, causal):
    from torch.nn.attention import sdpa_kernel
    fn, how = sdpa_call(torch, backend, dtype, batch, q_len, ctx, causal)
    if fn is None:
        return None, how
    with sdpa_kernel(backend):
        t = time_us(fn, torch)
    del fn
    torch.cuda.empty_cache()
    return t, how


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", help="path of benchmarks/cuda_attention_bench")
    ap.add_argument("--prefill-only", action="store_true",
                    help="only the prefill table, ours over bf16 KV (no fp32 KV, no decode)")
    ap.add_argument("--bf16-only", action="store_true",
                    help="both tables, ours over bf16 KV only (no fp32 KV columns)")
    a = ap.parse_args()
    try:
        import torch
        from torch.nn.attention import SDPBackend
    except Exception as e:
        print(f"attention_vs_torch: torch (with torch.nn.attention) not importable here ({e}): skipped")
        return 0
    if not torch.cuda.is_available():
        print("attention_vs_torch: torch sees no CUDA device: skipped")
        return 0
    kv_dtypes = ("bf16",) if a.prefill_only or a.bf16_only else ("bf16", "fp32")
    mine = {kv: ours(a.bench, kv, a.prefill_only) for kv in kv_dtypes}
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"heads {HEADS} q / {KV_HEADS} kv, head_dim {HEAD_DIM}. Ours: paged KV (blocks of 16, "
          "scattered), invariant; bf16 KV on the tensor cores, fp32 KV on CUDA cores. Torch: flash "
          "SDPA, dense bf16.")
    print("ratio = torch µs ÷ ours µs (> 1: ours faster).\n")
    flash, bf16 = SDPBackend.FLASH_ATTENTION, torch.bfloat16
    print("### Prefill (causal)\n")
    print("| L | ours bf16 µs | TFLOP/s | torch µs | TFLOP/s | ratio | ours fp32 KV TFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    rows = [(f"{n}", [n]) for n in PREFILL] + [("+".join(map(str, MIXED)), MIXED)]
    for name, lens in rows:
        if len(lens) == 1:
            key = ("prefill", 1, lens[0], lens[0])
        else:
            key = ("mixed", len(lens), sum(lens), max(lens))
        ob, of = mine["bf16"][key], mine["fp32"][key] if "fp32" in mine else None
        flop = sum(prefill_flop(1, n) for n in lens)
        fp32 = f"{flop / of * 1e-6:.2f}" if of else "—"
        t, how = 0.0, ""
        for n in lens:
            tn, how = torch_us(torch, flash, bf16, 1, n, n, True)
            if tn is None:
                t = None
                break
            t += tn
        if t is None:
            print(f"| {name} | {ob:.1f} | {flop / ob * 1e-6:.1f} | — | — | — | {fp32} | torch refused: {how}")
            continue
        print(f"| {name} | {ob:.1f} | {flop / ob * 1e-6:.1f} | {t:.1f} | {flop / t * 1e-6:.1f} | "
              f"{t / ob:.2f} | {fp32} |")
    if a.prefill_only:
        return 0
    print("\n### Decode (q_len 1)\n")
    print("| batch | context | ours bf16 µs | KV TB/s | torch µs | KV TB/s | ratio | ours fp32 KV µs | fp32 TB/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for b in DECODE_BATCHES:
        for c in DECODE_CONTEXTS:
            key = ("decode", b, 1, c)
            ob, of = mine["bf16"][key], mine["fp32"][key] if "fp32" in mine else None
            elems = 2.0 * b * c * KV_HEADS * HEAD_DIM
            t, how = torch_us(torch, flash, bf16, b, 1, c, False)
            tt = f"{t:.1f} | {elems * 2 / t * 1e-6:.2f} | {t / ob:.2f}" if t else f"— | — | — (refused: {how})"
            fp32 = f"{of:.1f} | {elems * 4 / of * 1e-6:.2f}" if of else "— | —"
            print(f"| {b} | {c} | {ob:.1f} | {elems * 2 / ob * 1e-6:.2f} | {tt} | {fp32} |")
    print("\nTorch reads dense KV (its TB/s counts bf16 bytes; a 32-head repeat, when used, is not "
          "counted); ours gathers KV through a block table.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
