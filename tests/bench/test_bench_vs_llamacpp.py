"""scripts/bench_vs_llamacpp.py's reading of model_bench, and a guard against a pathological
CPU slowdown.

The script once read every row of model_bench's output whose first cell was a case name, so the
last table's column (GFLOP/s) replaced tokens/s and every detllm figure came out ~10x too low
(a "regression" that was the parser's). parse_model_bench now takes only the first table, finds
its columns by name, and checks each row against its own ms per step; these tests feed it
synthetic outputs (the real layout, reordered tables, duplicates, a wrong column, no table).

When $MODEL_BENCH is set (CTest sets it), one tiny real model_bench run on the default model:
its output must parse, and single-sequence decode must reach at least 3% of the streaming-read
bandwidth that model_bench measures in the same run, in each numerics class (f32, q8) (the roofline table's "efficiency (read)":
0.2-0.3 on the 2-core dev machine at one thread when this was written). The margin is ~10x, so
load on a slow CI machine does not trip it; a step that reads fp32 weights, a scalar reference
path or re-dequantizing every step would.

    .venv/bin/python -m pytest tests/bench/test_bench_vs_llamacpp.py -q
"""
import importlib.util
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "bench_vs_llamacpp", os.path.join(ROOT, "scripts", "bench_vs_llamacpp.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

MIN_DECODE_READ_EFFICIENCY = 0.03

# model_bench's layout (benchmarks/model_bench.cpp), shortened: the first table, then tables
# whose rows start with the same case names.
OUTPUT = """# model_bench: m.gguf (30 layers, dim 576, ffn 1536, vocab 49152), CPU backend, matrices held as q4_1 x 210, q8_0 x 1

median of 1 repetitions after one warm-up; ...

| case | threads | tokens/s | ms per step | speedup vs 1 thr |
|---|---|---|---|---|
| prefill 128 | 1 | 131.0 | 976.8 | 1.00 |
| decode 1 seq | 1 | 15.9 | 62.8 | 1.00 |
| decode batch 8 | 1 | 70.9 | 112.8 | 1.00 |
| engine decode batch 8 | 1 | 63.1 | 126.8 | 1.00 |
| prefill 128 | 2 | 250.0 | 512.0 | 1.91 |

## decode vs memory-bandwidth roofline

| case | threads | MB read/step | measured ms/step | achieved GB/s | copy GB/s | roofline ms (copy) | efficiency (copy) | read GB/s | efficiency (read) |
|---|---|---|---|---|---|---|---|---|---|
| decode 1 seq | 1 | 103 | 62.8 | 1.6 | 13.8 | 7.4 | 0.12 | 8.3 | 0.20 |
| decode batch 8 | 1 | 103 | 112.8 | 0.9 | 13.8 | 7.5 | 0.07 | 8.3 | 0.11 |

## arithmetic rate (2 FLOP per weight per token, attention excluded)

| case | threads | GFLOP/s | vs prefill 128 |
|---|---|---|---|
| prefill 128 | 1 | 9.4 | 1.00 |
| decode 1 seq | 1 | 1.1 | 0.12 |
| decode batch 8 | 1 | 5.1 | 0.54 |
"""


def test_reads_the_first_table_only():
    assert bench.parse_model_bench(OUTPUT) == {
        ("prefill 128", 1): 131.0, ("decode 1 seq", 1): 15.9, ("decode batch 8", 1): 70.9,
        ("prefill 128", 2): 250.0}


def test_tokens_per_step():
    assert bench.tokens_per_step("prefill 512") == 512
    assert bench.tokens_per_step("decode 1 seq") == 1
    assert bench.tokens_per_step("decode batch 32") == 32


def test_a_table_before_it_is_not_taken_for_it():
    # The GFLOP/s table first: its rows are not under the tokens/s header, so they are skipped.
    gflops = OUTPUT[OUTPUT.index("## arithmetic"):]
    assert bench.parse_model_bench(gflops + "\n" + OUTPUT)[("decode 1 seq", 1)] == 15.9


@pytest.mark.parametrize("text, message", [
    ("no tables at all\n", "no '| case | threads | tokens/s"),
    ("| case | threads | GFLOP/s | vs prefill 128 |\n|---|---|---|---|\n"
     "| prefill 128 | 1 | 9.4 | 1.00 |\n", "no '| case | threads | tokens/s"),
    ("| case | threads | tokens/s | ms per step | x |\n|---|---|---|---|---|\n", "no prefill/decode"),
    ("| case | threads | tokens/s | ms per step | x |\n|---|---|---|---|---|\n"
     "| decode 1 seq | 1 | 15.9 | 62.8 | 1.00 |\n| decode 1 seq | 1 | 15.9 | 62.8 | 1.00 |\n",
     "twice"),
    # tokens/s from another column: 1.1 tok/s x 62.8 ms is not the 1 token of a decode step
    ("| case | threads | tokens/s | ms per step | x |\n|---|---|---|---|---|\n"
     "| decode 1 seq | 1 | 1.1 | 62.8 | 1.00 |\n", "not the tokens/s column"),
    ("| case | threads | tokens/s | ms per step | x |\n|---|---|---|---|---|\n"
     "| prefill 128 | 1 | 131.0 | 100.0 | 1.00 |\n", "not the 128 of one step"),
    ("| case | threads | tokens/s | ms per step | x |\n|---|---|---|---|---|\n"
     "| decode 1 seq | one | 15.9 | 62.8 | 1.00 |\n", "not numeric"),
    ("| case | threads | tokens/s | ms per step | x |\n|---|---|---|---|---|\n"
     "| decode 1 seq | 1 |\n", "cells"),
    ("| case | threads | tokens/s | ms per step | x |\n|---|---|---|---|---|\n"
     "| decode 1 seq | 1 | 0 | 0 | 1.00 |\n", "not the tokens/s column"),
])
def test_malformed_outputs_are_refused(text, message):
    with pytest.raises(ValueError, match=message.replace("|", r"\|")):
        bench.parse_model_bench(text)


def roofline_read_efficiency(text, case, threads):
    """The 'efficiency (read)' cell of model_bench's roofline table, found by column name."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:2] == ["case", "threads"] and "efficiency (read)" in cells:
            col = cells.index("efficiency (read)")
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                r = [c.strip() for c in row.strip().strip("|").split("|")]
                if r[0] == case and int(r[1]) == threads:
                    return float(r[col])
    raise AssertionError(f"no roofline row for {case} at {threads} threads in:\n{text}")


@pytest.mark.skipif(not os.environ.get("MODEL_BENCH"), reason="MODEL_BENCH (the model_bench "
                    "binary) not set; CTest sets it")
@pytest.mark.parametrize("activations", ["f32", "q8"])
def test_real_model_bench_parses_and_is_not_pathologically_slow(activations):
    p = subprocess.run([os.environ["MODEL_BENCH"], "--reps", "1", "--threads", "1", "--prefill",
                        "32", "--batches", "4", "--decode-steps", "8", "--batch-decode-steps",
                        "2", "--activations", activations], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = bench.parse_model_bench(p.stdout)
    assert set(rows) == {("prefill 32", 1), ("decode 1 seq", 1), ("decode batch 4", 1)}
    header = p.stdout.splitlines()[0]
    assert "matrices held as q4_1" in header, header
    assert ("cpu-q8" in header) == (activations == "q8"), header
    eff = roofline_read_efficiency(p.stdout, "decode 1 seq", 1)
    assert eff >= MIN_DECODE_READ_EFFICIENCY, (
        f"single-sequence decode at {eff:.3f} of the read bandwidth measured in the same run "
        f"(>= {MIN_DECODE_READ_EFFICIENCY} expected, ~0.2-0.3 normal): a pathological CPU "
        f"slowdown\n{p.stdout}")
