#!/usr/bin/env python3
"""llguidance's side of the grammar-engine measurement (docs/structured_output.md): the same
cases and the same tokens as benchmarks/grammar_bench (its --dump output), through llguidance's
Python API (the measured calls run in its Rust core with the GIL released; the Python overhead
per call is included). Run in a venv with the llguidance wheel installed:

  python3 -m venv /tmp/llgvenv && /tmp/llgvenv/bin/pip install llguidance==1.9.1
  build/benchmarks/grammar_bench --tokenizer T/tokenizer.json --dump /tmp/gdump
  /tmp/llgvenv/bin/python scripts/grammar_bench_llguidance.py T/tokenizer.json /tmp/gdump
"""
import json
import os
import sys
import time

import llguidance


def stats(v):
    v = sorted(v)
    at = lambda q: v[min(len(v) - 1, int(q * len(v)))]
    return sum(v) / len(v), at(0.5), at(0.9), at(0.99), v[-1]


def main():
    tokenizer_json, dump = sys.argv[1], sys.argv[2]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    cases = ["json_schema_50_fields", "json_schema_person", "json_object"]
    first = json.load(open(os.path.join(dump, cases[0] + ".json")))
    t0 = time.perf_counter()
    tok = llguidance.LLTokenizer(open(tokenizer_json).read(), eos_token=first["eos"])
    info_ms = (time.perf_counter() - t0) * 1e3
    print(f"llguidance {llguidance.__version__ if hasattr(llguidance, '__version__') else ''}: "
          f"{tok.vocab_size} tokens, eos {tok.eos_token}; tokenizer {info_ms:.1f} ms")
    opts = {"whitespace_flexible": True}
    print(f"\n{'case':24s} {'compile ms':>12s} {'(min..max)':>12s} {'tokens':>8s} {'mean us':>9s} "
          f"{'p50 us':>9s} {'p90 us':>9s} {'p99 us':>9s} {'max us':>9s}")
    for name in cases:
        d = json.load(open(os.path.join(dump, name + ".json")))
        grammar = llguidance.LLMatcher.grammar_from_json_schema(d["schema"], defaults=opts)
        compile_ms, mask_us = [], []
        words = (tok.vocab_size + 31) // 32
        buf = bytearray(4 * words)
        import ctypes
        ptr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
        for _ in range(repeats):
            t0 = time.perf_counter()
            m = llguidance.LLMatcher(tok, grammar, log_level=0)
            # The first mask builds the lexer's initial state: count it in the compile.
            m.unsafe_compute_mask_ptr(ptr, len(buf))
            compile_ms.append((time.perf_counter() - t0) * 1e3)
            assert not m.is_error(), m.get_error()
        for _ in range(repeats):
            m = llguidance.LLMatcher(tok, grammar, log_level=0)
            for k, t in enumerate(d["tokens"]):
                t0 = time.perf_counter()
                m.unsafe_compute_mask_ptr(ptr, len(buf))
                mask_us.append((time.perf_counter() - t0) * 1e6)
                ok = m.consume_token(t)
                assert ok and not m.is_error(), (name, k, t, m.get_error())
            assert m.is_stopped(), name
        c, s = stats(compile_ms), stats(mask_us)
        print(f"{name:24s} {c[1]:12.1f} {min(compile_ms):5.1f}..{c[4]:<6.1f} {len(d['tokens']):8d} "
              f"{s[0]:9.1f} {s[1]:9.1f} {s[2]:9.1f} {s[3]:9.1f} {s[4]:9.1f}")
    print(f"\ncompile ms: median of {repeats} (matcher construction + first mask); mask us: one "
          f"unsafe_compute_mask_ptr per token, {repeats} walks")


if __name__ == "__main__":
    main()
