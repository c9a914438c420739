"""Cost of trainer-side parity: detllm.torch.causal_lm_logprobs forward + backward against a
plain torch forward + backward of the same model (detllm/torch/reference.py), same weights and
sequences, in one run (issue 15's target on the H200: <= 1.3x). The parity path is timed with
the engine's forward overlapped with torch's (the default) and one after the other, beside the
engine's forward (llm.score) and torch's forward alone. Also times one full update_weights
(every parameter, from torch). Prints ratios.

  PYTHONPATH=python:build-py/python python python/bench/parity_cost.py [--backend cpu|cuda]
      [--model PATH] [--batch 4] [--len 128] [--repeat 3] [--kv-cache-tokens N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

try:
    import torch
except ImportError:
    sys.exit("python/bench/parity_cost.py needs torch (pip install torch)")

import detllm
import detllm.torch as dt


def timed(fn, repeat, sync):
    ts = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--len", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", default=None, help="default: the default model ($DETLLM_DEFAULT_MODEL)")
    ap.add_argument("--kv-cache-tokens", type=int, default=0,
                    help="the engine's KV pool (0: its own sizing; leave torch memory on a GPU)")
    a = ap.parse_args()
    torch.manual_seed(0)
    llm = detllm.LLM(model=a.model, backend=a.backend, kv_cache_tokens=a.kv_cache_tokens)
    device = "cuda" if a.backend == "cuda" else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    params = dt.reference.params_from_llm(llm, device=device)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, llm.config["vocab_size"], (a.len,), generator=g) for _ in range(a.batch)]

    def plain():
        lp = dt.reference.sequences_logprobs(llm.config, params, seqs)
        torch.autograd.grad(lp.sum(), list(params.values()))

    def parity(overlap=True):
        lps = dt.causal_lm_logprobs(llm, seqs, params, sync_weights=False, overlap=overlap)
        torch.autograd.grad(torch.cat(lps).sum(), list(params.values()))

    def engine_forward():
        llm.score([s.tolist() for s in seqs], use_tqdm=False)

    def torch_forward():
        with torch.no_grad():
            dt.reference.sequences_logprobs(llm.config, params, seqs)

    def update():
        with torch.no_grad():
            llm.update_weights({n: p.detach() for n, p in params.items()}, version="bench")

    plain(), parity(), parity(False)  # warm-up
    # interleaved rounds (plain, parity, serial parity), so drifts hit all three alike
    ts = {"plain": [], "parity": [], "serial": [], "engine": [], "torch_fwd": []}
    for _ in range(a.repeat):
        ts["plain"].append(timed(plain, 1, sync))
        ts["parity"].append(timed(parity, 1, sync))
        ts["serial"].append(timed(lambda: parity(False), 1, sync))
        ts["engine"].append(timed(engine_forward, 1, sync))
        ts["torch_fwd"].append(timed(torch_forward, 1, sync))
    med = {k: statistics.median(v) for k, v in ts.items()}
    t_plain, t_parity = med["plain"], med["parity"]
    t_update = timed(update, a.repeat, sync)
    n_bytes = sum(p.numel() * 4 for p in params.values())
    print(f"{a.backend}: {llm.model_name}, {a.batch} sequences x {a.len} tokens, "
          f"{llm.config['n_layers']} layers, vocab {llm.config['vocab_size']}, median of {a.repeat}")
    print(f"engine forward (llm.score) alone     : {med['engine'] * 1e3:9.1f} ms")
    print(f"torch forward alone (no grad)        : {med['torch_fwd'] * 1e3:9.1f} ms")
    print(f"plain torch forward + backward       : {t_plain * 1e3:9.1f} ms")
    print(f"causal_lm_logprobs fwd + bwd, overlap: {t_parity * 1e3:9.1f} ms")
    print(f"causal_lm_logprobs fwd + bwd, serial : {med['serial'] * 1e3:9.1f} ms")
    print(f"parity / plain                       : {t_parity / t_plain:.3f} (serial "
          f"{med['serial'] / t_plain:.3f}); target <= 1.3: {'met' if t_parity / t_plain <= 1.3 else 'missed'}")
    print(f"update_weights (all {len(params)} tensors, {n_bytes / 2**20:.0f} MiB fp32): "
          f"{t_update * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
