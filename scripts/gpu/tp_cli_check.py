#!/usr/bin/env python3
"""`--tensor-parallel N` through the real binary on a device where no model travels (issue 17;
docs/tensor_parallel.md): writes a random Llama with the default model's shapes (SmolLM2-135M:
9 q / 3 KV heads, FFN 1536; python/bench/random_model.py, numpy only), then

  - `detllm generate` with no flag and at --tensor-parallel 1, 2 and 4: TP 2 and 4 give TP 1's
    token ids (ids compared, never text) and fingerprint; no flag (the one-device model) has a
    fingerprint of its own;
  - `detllm score` of the generated sequence at TP 1 and 2: the same logprob JSON (the same
    float32 bits).

Prints one line per check and exits non-zero when one fails. Logs under --out.

  python3 scripts/gpu/tp_cli_check.py DETLLM_BIN [--backend cuda] [--preset smollm2-135m]
      [--out DIR] [--work DIR]

On the CPU (`--backend cpu --preset tiny`) it runs in seconds: the same checks as
tests/e2e/test_tensor_parallel.py, on a model written here.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "The capital of France is"
N_TOKENS = 8


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("detllm")
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--preset", default="smollm2-135m")
    ap.add_argument("--out", default="tp-cli-out")
    ap.add_argument("--work", default="/tmp/tp-cli-check")
    a = ap.parse_args()
    out, work = Path(a.out), Path(a.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    model = work / f"random-{a.preset}"
    if not (model / "model.safetensors").exists():
        subprocess.run([sys.executable, str(ROOT / "python/bench/random_model.py"), str(model),
                        "--preset", a.preset, "--dtype", "bfloat16"], check=True)

    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(("PASS " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    def run(name: str, *args: str) -> subprocess.CompletedProcess:
        r = subprocess.run([a.detllm, *args, "--model", str(model), "--backend", a.backend],
                           capture_output=True, text=True, timeout=600)
        (out / f"{name}.log").write_text(r.stderr)
        (out / f"{name}.out").write_text(r.stdout)
        return r

    gen = {}
    for tp in (None, 1, 2, 4):
        name = f"generate-tp{tp or 'none'}"
        extra = [] if tp is None else ["--tensor-parallel", str(tp)]
        r = run(name, "generate", PROMPT, "-n", str(N_TOKENS), "--ignore-eos", "--print-token-ids",
                *extra)
        if r.returncode != 0:
            check(False, f"{name} ran (rc {r.returncode}: {r.stderr.strip().splitlines()[-1:]})")
            continue
        ids = re.search(r"generated token ids: ([\d ]+)", r.stderr)
        prompt = re.search(r"prompt token ids: ([\d ]+)", r.stderr)
        fp = re.search(r"fingerprint (fp_[0-9a-f]{16})", r.stderr)
        check(bool(ids and prompt and fp), f"{name} printed its token ids and fingerprint")
        if ids and prompt and fp:
            gen[tp] = ([int(t) for t in prompt.group(1).split()],
                       [int(t) for t in ids.group(1).split()], fp.group(1))
    if 1 in gen:
        for tp in (2, 4):
            if tp in gen:
                check(gen[tp][1] == gen[1][1], f"generate TP {tp} token ids == TP 1's {gen[1][1]}")
                check(gen[tp][2] == gen[1][2], f"generate TP {tp} fingerprint == TP 1's {gen[1][2]}")
        if None in gen:
            check(gen[None][2] != gen[1][2],
                  "the one-device model (no flag) has a fingerprint of its own")
        prompt, ids, _ = gen[1]
        seqs = work / "seqs.json"
        seqs.write_text(json.dumps([prompt + ids, prompt]))
        scored = {}
        for tp in (1, 2):
            r = run(f"score-tp{tp}", "score", "--input", str(seqs), "--greedy", "4",
                    "--tensor-parallel", str(tp))
            check(r.returncode == 0, f"score TP {tp} ran")
            if r.returncode == 0:
                scored[tp] = json.loads(r.stdout)
        if len(scored) == 2:
            check(scored[2] == scored[1], "score TP 2 logprobs == TP 1's (the same float32 bits)")
            check(scored[1][1]["greedy"] == ids[:4], "score's greedy continuation == generate's")
    print(f"{'FAILED' if failures else 'PASSED'}: {len(failures)} failed check(s); logs in {out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
