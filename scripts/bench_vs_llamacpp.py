#!/usr/bin/env python3
"""detllm's CPU backend against llama.cpp on the same GGUF, threads and machine, in one run:
prefill (128 and 512 tokens), single-sequence decode (after a 128-token prompt) and batched
decode (8 and 32 sequences sharing a 128-token prompt) at 1 and 2 threads, for each of
detllm's CPU numerics classes (--activations f32,q8: fp32 activations, or activations rounded
to int8 per 32-block as llama.cpp does; kernels/ref/q8_act_ref.h). llama.cpp's side is
llama-bench (prefill, decode with -d 128) and llama-batched-bench (-pps: the prompt shared, as
model_bench does); detllm's is build/benchmarks/model_bench. The programs run in turn, --rounds
times (interleaved, so load spikes hit both), and each figure is the median over rounds. Prints
a markdown table of tokens/s and the ratio detllm ÷ llama.cpp, with the load average around it.

llama.cpp is built outside the repository from the source PyPI's llama-cpp-python sdist vendors
(docs/perf.md has the commands). Run:
  python3 scripts/bench_vs_llamacpp.py --llama-build /work/llamacpp-build [--rounds 3]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_avg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run(cmd):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return p.stdout


def llama_bench(bin_dir, model, threads):
    """{(case, threads): tok/s} from llama-bench -o jsonl."""
    out = {}
    t = ",".join(map(str, threads))
    for args, case_of in (
        (["-p", "128,512", "-n", "0"], lambda r: f"prefill {r['n_prompt']}"),
        (["-p", "0", "-n", "64", "-d", "128"], lambda r: "decode 1 seq"),
    ):
        text = run([os.path.join(bin_dir, "llama-bench"), "-m", model, "-t", t, "-r", "1",
                    "-o", "jsonl"] + args)
        for line in text.splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            out[(case_of(r), int(r["n_threads"]))] = float(r["avg_ts"])
    return out


def llama_batched(bin_dir, model, threads, batches):
    out = {}
    for th in threads:
        text = run([os.path.join(bin_dir, "llama-batched-bench"), "-m", model, "-c", "4096",
                    "-b", "2048", "-ub", "512", "-npp", "128", "-ntg", "16", "-npl",
                    ",".join(map(str, batches)), "-pps", "-t", str(th), "-tb", str(th),
                    "--output-format", "jsonl"])
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                out[(f"decode batch {r['pl']}", th)] = float(r["speed_tg"])
    return out


CASE = re.compile(r"^(prefill (\d+)|decode 1 seq|decode batch (\d+))$")


def tokens_per_step(case):
    """Tokens one step of a model_bench case processes: the prompt, 1, or the batch."""
    m = CASE.match(case)
    return int(m.group(2) or m.group(3) or 1)


def parse_model_bench(text):
    """{(case, threads): tok/s} from model_bench's FIRST table only, the one whose header is
    | case | threads | tokens/s | ms per step | ...; columns are found by their names.

    model_bench prints several tables whose rows start with the same case names (the roofline's
    and the GFLOP/s table); reading every matching row took the last table's column instead of
    tokens/s (GFLOP/s: 10x too low), so this refuses anything it cannot check. Each row must be
    self-consistent: tokens/s x ms per step / 1000 = the tokens of one step (2% slack for the
    printed rounding)."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:4] == ["case", "threads", "tokens/s", "ms per step"]:
            break
    else:
        raise ValueError("model_bench output has no '| case | threads | tokens/s | ms per step |'"
                         " table")
    out = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break  # the end of the first table
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4:
            raise ValueError(f"model_bench row with {len(cells)} cells: {line!r}")
        case = cells[0]
        if not CASE.match(case):
            continue  # e.g. "engine decode batch 8"
        try:
            threads, tps, ms = int(cells[1]), float(cells[2]), float(cells[3])
        except ValueError:
            raise ValueError(f"model_bench row not numeric: {line!r}") from None
        if (case, threads) in out:
            raise ValueError(f"model_bench row {case!r} at {threads} threads twice")
        want = tokens_per_step(case)
        got = tps * ms / 1000.0
        if tps <= 0 or ms <= 0 or abs(got - want) > 0.02 * want:
            raise ValueError(f"model_bench row {line!r}: tokens/s x ms per step = {got:.2f} "
                             f"tokens, not the {want} of one step: not the tokens/s column")
        out[(case, threads)] = tps
    if not out:
        raise ValueError("model_bench's table has no prefill/decode rows")
    return out


def detllm_bench(build, model, threads, batches, activations):
    return parse_model_bench(run([
        os.path.join(build, "benchmarks", "model_bench"), "--model", model, "--reps", "1",
        "--threads", ",".join(map(str, threads)), "--prefill", "128,512", "--batches",
        ",".join(map(str, batches)), "--decode-steps", "64", "--batch-decode-steps", "16",
        "--activations", activations]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-build", default="/work/llamacpp-build",
                    help="llama.cpp build folder (its bin/ holds llama-bench)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="detllm build folder")
    ap.add_argument("--model", default=os.path.join(ROOT, "models",
                                                    "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--activations", default="f32,q8",
                    help="detllm's CPU numerics classes to run (model_bench --activations): "
                         "f32 (no activation rounding), q8 (activations rounded to int8 per "
                         "32-block, as llama.cpp does)")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    classes = a.activations.split(",")
    for c in classes:
        if c not in ("f32", "q8"):
            sys.exit(f"--activations: unknown class {c!r} (f32, q8)")
    batches = [8, 32]
    bin_dir = os.path.join(a.llama_build, "bin")
    ours = {c: [] for c in classes}
    theirs, loads = [], [load_avg()]
    for _ in range(a.rounds):
        t = llama_bench(bin_dir, a.model, threads)
        t.update(llama_batched(bin_dir, a.model, threads, batches))
        theirs.append(t)
        loads.append(load_avg())
        for c in classes:
            ours[c].append(detllm_bench(a.build, a.model, threads, batches, c))
            loads.append(load_avg())
    cases = ["prefill 128", "prefill 512", "decode 1 seq"] + [f"decode batch {b}" for b in batches]
    print(f"# detllm vs llama.cpp, {os.path.basename(a.model)}, {a.rounds} rounds (median), "
          f"load average {min(loads):.2f}-{max(loads):.2f} on {os.cpu_count()} CPUs\n")
    busy = max(loads) - max(threads)  # other work beside the benchmark's own threads
    if busy > 0.5:
        print(f"**Not a quiet machine**: up to {busy:.1f} runnable tasks besides the benchmark's "
              f"{max(threads)} threads; the figures (two-thread ones most: spinning threads "
              "lose their cores) are of the load as much as of the code.\n")
    head = "| case | threads | llama.cpp tok/s |"
    rule = "|---|---|---|"
    for c in classes:
        head += f" detllm {c} tok/s | {c} ÷ llama.cpp |"
        rule += "---|---|"
    print(head)
    print(rule)

    def med(rows, key):
        v = [r[key] for r in rows if key in r]
        return statistics.median(v) if v else None

    for th in threads:
        for case in cases:
            lm = med(theirs, (case, th))
            line = f"| {case} | {th} | {'–' if lm is None else f'{lm:.1f}'} |"
            for c in classes:
                dm = med(ours[c], (case, th))
                line += f" {'–' if dm is None else f'{dm:.1f}'} |"
                line += f" {'–' if dm is None or not lm else f'{dm / lm:.2f}'} |"
            print(line)


if __name__ == "__main__":
    main()
