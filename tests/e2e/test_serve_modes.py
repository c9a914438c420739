"""`detllm serve --mode` from the outside (docs/modes.md): the verified mode's window settings
on the command line, refused without --mode verified; a verified server says its mode in the
X-Detllm-Determinism header, serves a request that requires its mode and refuses one that
requires another; deterministic and other requests are both served (mixed traffic), and a
deterministic greedy request gives the same tokens and logprobs twice.
"""
import os
import subprocess

import pytest

from conftest import ROOT, find_binary, start_server


def test_verify_options_need_the_verified_mode():
    binary = find_binary()
    if binary is None:
        pytest.skip("the detllm binary is not built (set DETLLM_BIN)")
    r = subprocess.run([binary, "serve", "--verify-window", "8"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert "add --mode verified" in r.stderr, r.stderr
    r = subprocess.run([binary, "serve", "--mode", "verified", "--verify-window", "64",
                        "--verify-group-tokens", "32"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert "must hold at least one window" in r.stderr, r.stderr


def test_verified_server_with_window_settings():
    s = start_server("--mode", "verified", "--verify-window", "4", "--verify-group-tokens", "32")
    try:
        body = {"model": "default", "prompt": "The capital of France is", "max_tokens": 12,
                "temperature": 0, "logprobs": 1}
        r = s.post("/v1/completions", {**body, "determinism_mode": "verified"})
        assert r.status_code == 200, r.text
        assert "mode=verified" in r.headers["X-Detllm-Determinism"]
        again = s.post("/v1/completions", body)
        assert again.status_code == 200, again.text
        first, second = r.json()["choices"][0], again.json()["choices"][0]
        assert first["logprobs"]["token_ids"] == second["logprobs"]["token_ids"]
        assert first["logprobs"]["token_logprobs"] == second["logprobs"]["token_logprobs"]
        other = s.post("/v1/completions", {**body, "deterministic": False})
        assert other.status_code == 200, other.text
        wrong = s.post("/v1/completions", {**body, "determinism_mode": "invariant"})
        assert wrong.status_code == 400, wrong.text
        err = wrong.json()["error"]
        assert err["param"] == "determinism_mode" and "'verified'" in err["message"], err
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_q8_activation_server_is_its_own_numerics_class(server):
    """`serve --activations q8` (the CPU's llama.cpp-style class, docs/perf.md): a greedy request
    gives the same token ids and logprobs twice, its logprobs are not the default class's, and
    its system_fingerprint differs from the default server's (a different rounding, so a
    response of one is never claimed replayable on the other)."""
    body = {"model": "default", "prompt": "The capital of France is", "max_tokens": 8,
            "temperature": 0, "logprobs": 1}
    base = server.post("/v1/completions", body)
    assert base.status_code == 200, base.text
    s = start_server("--activations", "q8", "--no-self-check")
    try:
        r = s.post("/v1/completions", body)
        again = s.post("/v1/completions", body)
        assert r.status_code == 200 and again.status_code == 200, r.text
        first, second = r.json(), again.json()
        lp = lambda j: j["choices"][0]["logprobs"]  # noqa: E731
        assert lp(first)["token_ids"] == lp(second)["token_ids"]
        assert lp(first)["token_logprobs"] == lp(second)["token_logprobs"]
        assert lp(first)["token_logprobs"] != lp(base.json())["token_logprobs"]
        assert first["system_fingerprint"] == second["system_fingerprint"]
        assert first["system_fingerprint"] != base.json()["system_fingerprint"]
    finally:
        assert s.stop() == 0, "".join(s.log)


def test_q8_activations_refused_where_they_change_nothing(tmp_path):
    """--activations q8 on --backend cuda, or on a model with no Q4_0/Q4_1/Q8_0 matrix, is refused
    by name (the fingerprint would name a rounding that never happens)."""
    binary = find_binary()
    if binary is None:
        pytest.skip("the detllm binary is not built (set DETLLM_BIN)")
    r = subprocess.run([binary, "generate", "--backend", "cuda", "--activations", "q8", "-n", "1",
                        "Hi"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--activations q8 is a cpu numerics class" in r.stderr, r.stderr
    r = subprocess.run([binary, "generate", "--activations", "q4", "Hi"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "q4" in r.stderr, r.stderr
    seqs = tmp_path / "seqs.json"
    seqs.write_text("[[1, 2, 3]]")
    # a tiny transformers-written checkpoint: safetensors, no block types
    float_model = os.path.join(ROOT, "tests", "data", "loaders", "hf_v5", "llama31")
    args = [binary, "score", "--model", float_model, "--input", str(seqs), "--output",
            str(tmp_path / "out.json")]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(args + ["--activations", "q8"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "holds no Q4_0, Q4_1 or Q8_0 matrix" in r.stderr, r.stderr
