"""Throughput of llm.generate from Python against `detllm bench` on the same workload, in one
run: the binding's cost (issue 15's target: Python >= 0.97x the CLI). Both run the same
requests (written by the bench with --save-requests: random prompt ids, fixed lengths), the
same sampling (temperature, seed + request index, ignore EOS), the `invariant` mode, a warm-up
of every request capped at 16 tokens, and the median of --repeat timed runs. Prints a ratio.

--forward picks what the session's CPU forward reads: `blocks` (the default: the GGUF's blocks,
as the CLI reads them, until the first update_weights) or `f32` (the host fp32 weights, as after
an update: one update of model.norm.weight with its own values is made first). --rounds R
alternates R times (CLI bench, then each Python path), so that a load change on a shared
machine reaches both sides; each line is one round, and the summary is the median ratio.

--via picks the Python path (several: comma-separated, one ratio each): `llm` (LLM.generate),
`trl` (detllm.integrations.trl's rollout_func, called as TRL's GRPOTrainer calls it, one prompt
entry per request) or `verl` (detllm.integrations.verl's DetllmRollout: one async generate per
request, all in flight together, as verl's agent loop sends them). The adapters' seeds are
their own (derived from the step / request id), which changes no length (EOS is ignored).

  PYTHONPATH=python:build-py/python .venv/bin/python python/bench/generate_vs_cli.py \
      [--detllm build-py/detllm] [--backend cpu|cuda] [--model PATH|synthetic:NAME]
      [--n 32] [--input-len 64] [--output-len 64] [--repeat 3] [--via llm,trl,verl]
      [--forward blocks|f32] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import types
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import detllm
import detllm.llm  # default_model_path (detllm imports its modules on first use)

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
    ap.add_argument("--via", default="llm", help="llm, trl, verl, or several comma-separated")
    ap.add_argument("--forward", default="blocks", choices=["blocks", "f32"])
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    binary = find_binary(a.detllm)
    model = a.model or detllm.llm.default_model_path()

    def cli_bench():
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
        return run, [json.loads(l) for l in lines[1:]]

    run, requests = cli_bench()
    cli_tps = run["output_tokens_per_s"]

    # No prefix cache: the bench builds a fresh engine for every run, so its repeats never hit
    # the prompts of the warm-up or of an earlier run; one LLM keeps its engine and would.
    llm = detllm.LLM(model=model, backend=a.backend, mode="invariant", threads=a.threads,
                     enable_prefix_caching=False)
    prompts = [{"prompt_token_ids": r["prompt"]} for r in requests]

    def params(cap=None):
        return [detllm.SamplingParams(temperature=a.temperature, seed=a.seed + i, ignore_eos=True,
                                      max_tokens=min(r["output_len"], cap or r["output_len"]))
                for i, r in enumerate(requests)]

    if a.forward == "f32" and llm._s.forward_reads_blocks:
        name = "model.norm.weight"
        llm.update_weights({name: llm.get_parameter(name)}, version="f32-forward")
    llm.generate(prompts, params(16), use_tqdm=False)  # warm-up, as the bench's
    print(f"workload: {model}, {a.n} requests x ({a.input_len} prompt, {a.output_len} output) "
          f"tokens, {a.backend}, invariant, {a.threads} threads, median of {a.repeat}; session "
          f"forward reads {'GGUF blocks' if llm._s.forward_reads_blocks else 'host fp32'}")
    runners = {"llm": lambda: via_llm(llm, prompts, params()),
               "trl": lambda: via_trl(llm, requests, a),
               "verl": lambda: via_verl(llm, requests, a)}
    ratios = {via: [] for via in a.via.split(",")}
    for r in range(a.rounds):
        if r > 0:
            run, _ = cli_bench()
            cli_tps = run["output_tokens_per_s"]
        print(f"detllm bench : {cli_tps:9.1f} output tok/s (output tokens {run['output_tokens']}; "
              f"load average {os.getloadavg()[0]:.2f})")
        for via in ratios:
            if via not in runners:
                sys.exit(f"--via {via}: one of {', '.join(runners)}")
            durations, n_out = [], 0
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                n_out = runners[via]()
                durations.append(time.perf_counter() - t0)
            py_tps = n_out / statistics.median(durations)
            ratios[via].append(py_tps / cli_tps)
            print(f"{via:>4} (python): {py_tps:9.1f} output tok/s (output tokens {n_out}; "
                  f"runs {', '.join(f'{d:.2f}' for d in durations)} s; load average "
                  f"{os.getloadavg()[0]:.2f})")
            print(f"python / cli ({via}): {py_tps / cli_tps:.3f}; target >= 0.97: "
                  f"{'met' if py_tps / cli_tps >= 0.97 else 'missed'}", flush=True)
    if a.rounds > 1:
        for via, rs in ratios.items():
            print(f"median over {a.rounds} rounds, python / cli ({via}): {statistics.median(rs):.3f} "
                  f"(rounds {', '.join(f'{x:.3f}' for x in rs)})")
    return 0


def via_llm(llm, prompts, params):
    outs = llm.generate(prompts, params, use_tqdm=False)
    return sum(len(o.outputs[0].token_ids) for o in outs)


def via_trl(llm, requests, a):
    from detllm.integrations.trl import make_rollout_func

    rollout = make_rollout_func(llm, sync_weights=False, sampling_overrides={"ignore_eos": True})
    trainer = types.SimpleNamespace(
        args=types.SimpleNamespace(max_completion_length=requests[0]["output_len"],
                                   temperature=1.0),
        state=types.SimpleNamespace(global_step=0), model=None, accelerator=None)
    out = rollout([r["prompt"] for r in requests], trainer)
    return sum(len(c) for c in out["completion_ids"])


def via_verl(llm, requests, a):
    from detllm.integrations.verl import DetllmRollout

    rollout = DetllmRollout(llm)

    async def all_requests():
        return await asyncio.gather(*[
            rollout.generate(r["prompt"], {"max_tokens": r["output_len"], "temperature": 1.0,
                                           "ignore_eos": True, "logprobs": True}, request_id=f"r{i}")
            for i, r in enumerate(requests)])

    try:
        outs = asyncio.run(all_requests())
    finally:
        rollout.close()
    return sum(len(o.token_ids) for o in outs)


if __name__ == "__main__":
    sys.exit(main())
