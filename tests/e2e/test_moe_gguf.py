"""Mixture-of-experts GGUF files written by llama.cpp's own `gguf` package
(scripts/ref/moe_gguf.py, from the tiny transformers checkpoints of tests/data/loaders/hf_v5)
run with `detllm score`: with fp32 weights their logits are the Hugging Face directory's bit for
bit; with Q8_0 experts they stay within the stated tolerance of transformers' logits. This is
the check of detllm's reading of llama.cpp's layout (names, stacked experts, ne order, Mixtral's
q/k permutation) that does not go through detllm's own test writer
(tests/model/gguf_moe_export.h)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, find_binary

pytest.importorskip("gguf")
HF = os.path.join(ROOT, "tests", "data", "loaders", "hf_v5")
SCRIPT = os.path.join(ROOT, "scripts", "ref", "moe_gguf.py")
CASES = ["qwen3_moe", "mixtral", "qwen2_moe", "olmoe"]
Q8_TOL = 2e-3  # as tests/model/gguf_moe_test.cpp kQ8AbsTol


def convert(case, out, *extra):
    r = subprocess.run([sys.executable, SCRIPT, os.path.join(HF, case), str(out), *extra],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def score_logits(model, seqs, tmp_path, tag):
    binary = find_binary()
    if binary is None:
        pytest.skip("the detllm binary is not built (set DETLLM_BIN)")
    inp = tmp_path / f"{tag}.json"
    inp.write_text(json.dumps(seqs))
    logits = tmp_path / f"{tag}-logits"
    r = subprocess.run([binary, "score", "--model", str(model), "--input", str(inp), "--output",
                        str(tmp_path / f"{tag}-out.json"), "--logits-dir", str(logits),
                        "--threads", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [np.fromfile(logits / f"seq{i}.f32", dtype="<f4") for i in range(len(seqs))]


@pytest.mark.parametrize("case", CASES)
def test_llama_cpp_layout_gives_the_directory_logits(case, tmp_path):
    golden = json.loads(open(os.path.join(HF, case, "golden.json")).read())
    seqs = [s["tokens"] for s in golden["sequences"]]
    ref = np.fromfile(os.path.join(HF, case, "logits.f32"), dtype="<f4")
    hf = score_logits(os.path.join(HF, case), seqs, tmp_path, "hf")
    f32 = score_logits(convert(case, tmp_path / "f32.gguf"), seqs, tmp_path, "f32")
    q8 = score_logits(convert(case, tmp_path / "q8.gguf", "--experts", "q8_0"), seqs, tmp_path,
                      "q8")
    offset = 0
    for a, b, c in zip(hf, f32, q8):
        assert a.tobytes() == b.tobytes(), f"{case}: GGUF logits differ from the directory's"
        theirs = ref[offset:offset + len(c)]
        offset += len(c)
        assert np.abs(c - theirs).max() <= Q8_TOL, np.abs(c - theirs).max()
    assert offset == len(ref)


def test_norm_rule_llama_cpp_cannot_express_is_refused(tmp_path):
    r = subprocess.run([sys.executable, SCRIPT, os.path.join(HF, "qwen3_moe_ties"),
                        str(tmp_path / "x.gguf")], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "always renormalises" in r.stderr
