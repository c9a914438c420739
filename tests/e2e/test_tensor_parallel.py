"""`--tensor-parallel N` on the default model (SmolLM2-135M: 9 q / 3 KV heads, FFN 1536;
docs/tensor_parallel.md), through the real binary: `generate`, `score` and `serve` at TP 2 give
TP 1's token ids and logprob bits, the fingerprint is the same at every degree and differs from
the one-device model's (no flag), and degrees the model or the backend cannot run are refused
by name. Token ids are compared, not text."""
import json
import re
import subprocess

import pytest

from conftest import find_binary, start_server

PROMPT = "The capital of France is"
N_TOKENS = 8


def run(*args, timeout=300):
    binary = find_binary()
    if binary is None:
        pytest.skip("the detllm binary is not built (set DETLLM_BIN)")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout)


def generate(*extra):
    r = run("generate", PROMPT, "-n", str(N_TOKENS), "--ignore-eos", "--threads", "2",
            "--print-token-ids", *extra)
    assert r.returncode == 0, r.stderr
    ids = re.search(r"generated token ids: ([\d ]+)", r.stderr).group(1).split()
    prompt = re.search(r"prompt token ids: ([\d ]+)", r.stderr).group(1).split()
    fingerprint = re.search(r"fingerprint (fp_[0-9a-f]{16})", r.stderr).group(1)
    return [int(t) for t in prompt], [int(t) for t in ids], fingerprint, r.stderr


@pytest.fixture(scope="module")
def runs():
    return {tp: generate(*([] if tp is None else ["--tensor-parallel", str(tp)]))
            for tp in (None, 1, 2, 4)}


def test_generate_same_ids_and_fingerprint_at_every_degree(runs):
    _, ids1, fp1, _ = runs[1]
    assert len(ids1) == N_TOKENS
    for tp in (2, 4):  # 4: more ranks than the 2 threads and the 3 KV heads
        _, ids, fp, log = runs[tp]
        assert ids == ids1, f"TP {tp}"
        assert fp == fp1, f"TP {tp}: the degree entered the fingerprint"
        assert f"over {tp} tensor-parallel ranks" in log
    # The canonical chunks are a numerics of their own: not the one-device model's fingerprint.
    assert runs[None][2] != fp1


def test_score_same_logprob_bits_at_tp1_and_tp2(runs, tmp_path):
    prompt, ids, _, _ = runs[1]
    inp = tmp_path / "seqs.json"
    inp.write_text(json.dumps([prompt + ids, prompt]))
    out = {}
    for tp in (1, 2):
        r = run("score", "--input", str(inp), "--greedy", "4", "--threads", "2",
                "--tensor-parallel", str(tp))
        assert r.returncode == 0, r.stderr
        out[tp] = json.loads(r.stdout)
    # The same float32 values through the same JSON path: equal text, equal bits.
    assert out[2] == out[1]
    assert len(out[1][0]["logprobs"]) == len(prompt) + len(ids)
    # score's greedy continuation of the prompt is generate's (another path, the same bits).
    assert out[2][1]["greedy"] == ids[:4]


def test_serve_at_tp2_gives_tp1s_tokens_and_fingerprint(runs):
    prompt, ids1, fp1, _ = runs[1]
    server = start_server("--tensor-parallel", "2")
    try:
        assert any("over 2 tensor-parallel ranks" in line for line in server.log), server.log
        models = server.get("/v1/models").json()
        assert models["data"][0]["system_fingerprint"] == fp1
        r = server.post("/v1/completions", {"model": "default", "prompt": prompt,
                                            "max_tokens": N_TOKENS, "temperature": 0,
                                            "ignore_eos": True, "logprobs": 0})
        assert r.status_code == 200, r.text
        assert r.json()["system_fingerprint"] == fp1
        assert r.json()["choices"][0]["logprobs"]["token_ids"] == ids1
        info = [line for line in server.get("/metrics").text.splitlines()
                if line.startswith("detllm_info")]
        assert info and "tensor-parallel 2" in info[0], info
    finally:
        assert server.stop() == 0, "".join(server.log)


def test_q8_activations_at_tp2_give_tp1s_tokens_and_their_own_fingerprint(runs):
    """`--activations q8` with `--tensor-parallel`: the q8 class at TP 2 gives TP 1's token ids
    and fingerprint, and that fingerprint is not the f32 class's."""
    _, ids1, fp1, _ = generate("--activations", "q8", "--tensor-parallel", "1")
    _, ids2, fp2, log = generate("--activations", "q8", "--tensor-parallel", "2")
    assert ids2 == ids1 and fp2 == fp1
    assert "over 2 tensor-parallel ranks" in log
    assert fp1 != runs[1][2], "the q8 class at TP shares the f32 class's fingerprint"


def test_degrees_that_cannot_run_are_refused_by_name():
    r = run("generate", PROMPT, "-n", "1", "--tensor-parallel", "9")
    assert r.returncode != 0
    assert "tensor-parallel degree 9" in r.stderr and "allows 1, 2, 3, 4, 5, 6, 7, 8" in r.stderr, \
        r.stderr
    r = run("score", "--input", "/nonexistent.json", "--tensor-parallel", "0")
    assert r.returncode != 0 and "--tensor-parallel" in r.stderr, r.stderr
