"""The FP8 numerics class from the command line (docs/models.md, "FP8"): `detllm generate
--quantization fp8` (projections quantized to FP8 at load) and `--kv-dtype fp8` (K/V rounded to
E4M3 on append) on the default model give the same text twice, each with a fingerprint of its
own (the class is named in the backend build string, the weights digest changes), and the
combinations that are not implemented are refused with what to do; `detllm check
--quantization fp8` checks the projections' GEMMs on the FP8 linear (lm_head as stored).
"""
import os
import re
import subprocess

import pytest

from conftest import DEFAULT_MODEL, ROOT, find_binary

PROMPT = "The capital of France is"


def generate(*flags, timeout=600):
    binary = find_binary()
    if binary is None:
        pytest.skip("the detllm binary is not built (set DETLLM_BIN)")
    if not os.path.exists(DEFAULT_MODEL):
        pytest.skip("the default model is not installed (scripts/setup.sh)")
    return subprocess.run([binary, "generate", PROMPT, "-n", "6", "--threads", "2", *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def fingerprint(r):
    m = re.search(r"fingerprint (fp_[0-9a-f]{16})", r.stderr)
    assert m, r.stderr
    return m.group(1)


def test_fp8_classes_repeat_their_bits_under_fingerprints_of_their_own():
    runs = {"plain": generate(), "weights": generate("--quantization", "fp8"),
            "kv": generate("--kv-dtype", "fp8")}
    both = ["--quantization", "fp8", "--kv-dtype", "fp8"]
    runs["both"], again = generate(*both), generate(*both)
    for name, r in runs.items():
        assert r.returncode == 0, name + ": " + r.stderr
    assert runs["both"].stdout == again.stdout
    assert fingerprint(runs["both"]) == fingerprint(again)
    prints = {fingerprint(r) for r in runs.values()}
    assert len(prints) == 4, "each FP8 class has a fingerprint of its own"


def test_unimplemented_combinations_are_refused():
    r = generate("--quantization", "fp8", "--tensor-parallel", "2")
    assert r.returncode != 0
    assert "FP8" in r.stderr and "tensor" in r.stderr, r.stderr
    r = generate("--kv-dtype", "fp8", "--tensor-parallel", "2")
    assert r.returncode != 0
    assert "--kv-dtype fp8" in r.stderr, r.stderr
    r = generate("--quantization", "int4")
    assert r.returncode != 0


def test_check_runs_the_fp8_linear_on_the_projections():
    binary = find_binary()
    if binary is None:
        pytest.skip("the detllm binary is not built (set DETLLM_BIN)")
    if not os.path.exists(DEFAULT_MODEL):
        pytest.skip("the default model is not installed (scripts/setup.sh)")
    r = subprocess.run([binary, "check", "--threads", "2", "--quantization", "fp8"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    fp8 = [line for line in r.stdout.splitlines() if line.startswith("gemm ") and " fp8 " in line]
    assert len(fp8) >= 4, r.stdout  # q/o, k/v, gate/up, down (and the fused shapes)
    assert all(" ok " in line for line in fp8), r.stdout
    lm_head = [line for line in r.stdout.splitlines() if line.startswith("gemm lm_head")]
    assert lm_head and " fp8 " not in lm_head[0], r.stdout  # kept as stored
