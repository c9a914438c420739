"""Cost of trainer-side parity: detllm.torch.causal_lm_logprobs forward + backward against a
plain torch forward + backward of the same model (detllm/torch/reference.py), same weights and
sequences, in one run (issue 15's target on the H200: <= 1.3x). Also times one full
update_weights (every parameter, from torch). Prints ratios.

  PYTHONPATH=python:build-py/python python python/bench/parity_cost.py [--backend cpu|cuda]
      [--batch 4] [--len 128] [--repeat 3]
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
    a = ap.parse_args()
    llm = detllm.LLM(backend=a.backend)
    device = "cuda" if a.backend == "cuda" else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    params = dt.reference.params_from_llm(llm, device=device)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, llm.config["vocab_size"], (a.len,), generator=g) for _ in range(a.batch)]

    def plain():
        lp = dt.reference.sequences_logprobs(llm.config, params, seqs)
        torch.autograd.grad(lp.sum(), list(params.values()))

    def parity():
        lps = dt.causal_lm_logprobs(llm, seqs, params, sync_weights=False)
        torch.autograd.grad(torch.cat(lps).sum(), list(params.values()))

    def update():
        with torch.no_grad():
            llm.update_weights({n: p.detach() for n, p in params.items()}, version="bench")

    plain(), parity()  # warm-up
    t_plain, t_parity = timed(plain, a.repeat, sync), timed(parity, a.repeat, sync)
    t_update = timed(update, a.repeat, sync)
    n_bytes = sum(p.numel() * 4 for p in params.values())
    print(f"{a.backend}: {a.batch} sequences x {a.len} tokens, {llm.config['n_layers']} layers, "
          f"median of {a.repeat}")
    print(f"plain torch forward + backward      : {t_plain * 1e3:9.1f} ms")
    print(f"causal_lm_logprobs forward + backward: {t_parity * 1e3:9.1f} ms")
    print(f"parity / plain                      : {t_parity / t_plain:.3f}")
    print(f"update_weights (all {len(params)} tensors, {n_bytes / 2**20:.0f} MiB fp32): "
          f"{t_update * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
