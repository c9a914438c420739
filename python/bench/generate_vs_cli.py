"""Throughput of llm.generate from Python against `detllm bench` on the same workload, in one
run: the binding's cost (issue 15's target: Python >= 0.97x the CLI). Both run the same
requests (written by the bench with --save-requests: random prompt ids, fixed lengths), the
same sampling (temperature, seed + request index, ignore EOS), the `invariant` mode, a warm-up
of every request capped at 16 tokens, and the median of --repeat timed runs. Prints a ratio.

  PYTHONPATH=python:build-py/python .venv/bin/python python/bench/generate_vs_cli.py \
      [--detllm build-py/detllm] [--backend cpu|cuda] [--model PATH|synthetic:NAME]
      [--n 32] [--input-len 64] [--output-len 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import detllm

ROOT = Path(__file__).resolve().parents[2]


def find_binary(given):
    for c in [given, os.environ.get("DETLLM_BIN"), ROOT / "build-py/detllm", ROOT / "build/detllm"]:
        if c and Path(c).is_file():
            return str(c)
    sys.exit("no detllm binary: build one (ninja -C DIR detllm_cli) and pass --detllm")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--detllm")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--model", default=None,
                    help="default: the default model; synthetic:llama-3.1-8b on a GPU")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    binary = find_binary(a.detllm)
    model = a.model or detllm.llm.default_model_path()

    with tempfile.TemporaryDirectory() as tmp:
        reqs, rep = Path(tmp) / "requests.jsonl", Path(tmp) / "bench.json"
        cmd = [binary, "bench", "--model", model, "--backend", a.backend, "--workload", "fixed",
               "--n", str(a.n), "--input-len", str(a.input_len), "--output-len", str(a.output_len),
               "--modes", "invariant", "--det-share", "100", "--seed", str(a.seed),
               "-t", str(a.temperature), "--repeat", str(a.repeat), "--threads", str(a.threads),
               "--save-requests", str(reqs), "--json", str(rep)]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        report = json.loads(rep.read_text())
        lines = reqs.read_text().splitlines()
    run = [r for r in report["results"] if r["kind"] == "offline"][0]
    cli_tps = run["output_tokens_per_s"]
    requests = [json.loads(l) for l in lines[1:]]

    # No prefix cache: the bench builds a fresh engine for every run, so its repeats never hit
    # the prompts of the warm-up or of an earlier run; one LLM keeps its engine and would.
    llm = detllm.LLM(model=model, backend=a.backend, mode="invariant", threads=a.threads,
                     enable_prefix_caching=False)
    prompts = [{"prompt_token_ids": r["prompt"]} for r in requests]

    def params(cap=None):
        return [detllm.SamplingParams(temperature=a.temperature, seed=a.seed + i, ignore_eos=True,
                                      max_tokens=min(r["output_len"], cap or r["output_len"]))
                for i, r in enumerate(requests)]

    llm.generate(prompts, params(16), use_tqdm=False)  # warm-up, as the bench's
    durations, n_out = [], 0
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params(), use_tqdm=False)
        durations.append(time.perf_counter() - t0)
        n_out = sum(len(o.outputs[0].token_ids) for o in outs)
    py_tps = n_out / statistics.median(durations)
    print(f"workload: {model}, {a.n} requests x ({a.input_len} prompt, {a.output_len} output) "
          f"tokens, {a.backend}, invariant, {a.threads} threads, median of {a.repeat}")
    print(f"detllm bench : {cli_tps:9.1f} output tok/s (output tokens {run['output_tokens']})")
    print(f"llm.generate : {py_tps:9.1f} output tok/s (output tokens {n_out}; "
          f"runs {', '.join(f'{d:.2f}' for d in durations)} s)")
    print(f"python / cli : {py_tps / cli_tps:.3f}; target >= 0.97: "
          f"{'met' if py_tps / cli_tps >= 0.97 else 'missed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
