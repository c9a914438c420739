"""The accuracy cost of the FP8 classes (docs/models.md, "FP8"), one line per class: each text
below is scored by teacher forcing (llm.score) on the unquantized model and on the FP8 classes
of the same model, and the logprobs of the same tokens are compared: mean and max |delta
logprob|, and how many of the greedy continuation's first tokens agree. A measurement, not a
test: FP8 is another numerics class, so the figures are tolerances.

  PYTHONPATH=python:build/python-pkg python python/bench/fp8_accuracy.py [--model PATH]
      [--backend cpu|cuda] [--greedy 32]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import detllm

# Fixed texts of several kinds (prose, instructions, code, lists, numbers).
TEXTS = [
    "The committee postponed the vote until further notice, citing the need for a full review "
    "of the budget. Members are expected to meet again next month, after the auditors report.",
    "To make bread, mix flour, water, salt and yeast into a dough. Knead it for ten minutes, "
    "let it rise for an hour, shape it, let it rise again, and bake it in a hot oven.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    "    return a\n\nprint([fibonacci(i) for i in range(10)])\n",
    "Rivers of Europe: the Danube, the Rhine, the Elbe, the Loire, the Vistula, the Po, the "
    "Thames, the Seine and the Dnieper. The longest of them is the Volga.",
    "Q: What is the capital of Japan?\nA: Tokyo.\nQ: What is the capital of Canada?\nA: Ottawa.\n"
    "Q: What is the capital of Australia?\nA: Canberra.",
    "In 1969 the first humans landed on the Moon. The mission lasted eight days, and the crew "
    "brought back 21.5 kilograms of lunar rock and soil for study on Earth.",
    "Dear team, thank you for your work this quarter. Sales grew by 12 percent, costs fell, and "
    "two new customers signed long contracts. Let us keep the same focus next year.",
    "SELECT name, COUNT(*) AS orders FROM customers JOIN orders ON customers.id = "
    "orders.customer_id GROUP BY name ORDER BY orders DESC LIMIT 10;",
]

CLASSES = [
    ("weights fp8", {"quantization": "fp8"}),
    ("KV fp8", {"kv_cache_dtype": "fp8"}),
    ("weights + KV fp8", {"quantization": "fp8", "kv_cache_dtype": "fp8"}),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF file or HF directory (default: the default model)")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--greedy", type=int, default=32, help="greedy tokens compared after each text's first half")
    args = ap.parse_args()

    def engine(**kw):
        return detllm.LLM(args.model, backend=args.backend, **kw)

    t0 = time.perf_counter()
    ref = engine()
    tok = ref.get_tokenizer()
    seqs = [tok.encode(t) for t in TEXTS]
    heads = [s[: len(s) // 2] for s in seqs]
    greedy = detllm.SamplingParams(max_tokens=args.greedy, temperature=0.0, ignore_eos=True)
    ref_lp = [o.logprobs.astype(np.float64) for o in ref.score(seqs, use_tqdm=False)]
    ref_greedy = [list(o.outputs[0].token_ids) for o in ref.generate(
        [{"prompt_token_ids": h} for h in heads], greedy, use_tqdm=False)]
    model = os.path.basename(args.model) if args.model else "the default model"
    n_tokens = sum(len(lp) for lp in ref_lp)
    print(f"model: {model}; backend: {args.backend}; reference: the unquantized model "
          f"({ref.fingerprint}); {len(TEXTS)} texts, {n_tokens} scored tokens; greedy: "
          f"{args.greedy} tokens after each text's first half", file=sys.stderr)
    print("| class | fingerprint | mean \\|Δ logprob\\| | max \\|Δ logprob\\| | greedy tokens equal (first divergence, median) |")
    print("|---|---|---|---|---|")
    for name, kw in CLASSES:
        llm = engine(**kw)
        d = np.concatenate([np.abs(o.logprobs.astype(np.float64) - r)
                            for o, r in zip(llm.score(seqs, use_tqdm=False), ref_lp)])
        got = [list(o.outputs[0].token_ids) for o in llm.generate(
            [{"prompt_token_ids": h} for h in heads], greedy, use_tqdm=False)]
        first = []
        for a, b in zip(got, ref_greedy):
            k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            first.append(k)
        equal = sum(sum(x == y for x, y in zip(a, b)) for a, b in zip(got, ref_greedy))
        total = sum(len(b) for b in ref_greedy)
        print(f"| {name} | {llm.fingerprint} | {d.mean():.4f} | {d.max():.4f} | "
              f"{equal} / {total} ({int(np.median(first))}) |")
        del llm
    print(f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
