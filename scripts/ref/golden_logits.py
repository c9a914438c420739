#!/usr/bin/env python3
"""Golden logits from Hugging Face transformers (fp32) on the default model's GGUF weights.

transformers reads the GGUF through the `gguf` package and dequantizes it to fp32, so both
sides run the same weights. Writes tests/data/golden/smollm2_logits.json: for each prompt the
token ids, at every position the logits at a fixed set of vocabulary ids plus the top-10, and
a 40-step greedy continuation. Usage (needs torch, transformers, gguf):
    python scripts/ref/golden_logits.py MODEL.gguf tests/data/golden/smollm2_logits.json
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "<|im_start|>user\nWhat is 17 * 23?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a land far away, there lived a",
    "東京は日本の首都です。Emoji: 🚀✨ and numbers 1234567890.",
]
N_GREEDY = 40
N_PROBE = 48  # fixed vocabulary ids probed at every position


def main():
    path, out = sys.argv[1], sys.argv[2]
    d, f = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
    model.eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1234)
    probe = sorted(set(torch.randint(0, vocab, (N_PROBE,), generator=g).tolist()))
    cases = []
    for text in PROMPTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float()  # (L, vocab)
        positions = []
        for p in range(logits.shape[0]):
            row = logits[p]
            top = torch.topk(row, 10)
            sel = sorted(set(probe) | set(top.indices.tolist()))
            positions.append({"ids": sel, "logits": [float(row[i]) for i in sel]})
        # greedy continuation with full recompute each step (no cache): the plainest reference
        seq = list(ids)
        with torch.no_grad():
            for _ in range(N_GREEDY):
                nxt = int(torch.argmax(model(torch.tensor([seq])).logits[0, -1]))
                seq.append(nxt)
        cases.append({"text": text, "tokens": ids, "positions": positions,
                      "greedy": seq[len(ids):]})
        print(f"{text[:30]!r}: {len(ids)} tokens, greedy {tok.decode(seq[len(ids):])[:60]!r}",
              file=sys.stderr)
    meta = {"model": f, "transformers": __import__("transformers").__version__,
            "torch": torch.__version__, "dtype": "float32", "probe_ids": probe}
    with open(out, "w") as fh:
        json.dump({"meta": meta, "cases": cases}, fh, separators=(",", ":"))


if __name__ == "__main__":
    main()
