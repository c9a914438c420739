"""The FP8 numerics class from the command line (docs/models.md, "FP8"): `detllm generate
--quantization fp8` (projections quantized to FP8 at load) and `--kv-dtype fp8` (K/V rounded to
E4M3 on append) on the default model give the same text twice, each with a fingerprint of its
own (the class is named in the backend build string, the weights digest changes), and the
combinations that are not implemented are refused with what to do.
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
