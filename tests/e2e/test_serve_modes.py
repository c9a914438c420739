"""`detllm serve --mode` from the outside (docs/modes.md): the verified mode's window settings
on the command line, refused without --mode verified; a verified server says its mode in the
X-Detllm-Determinism header, serves a request that requires its mode and refuses one that
requires another; deterministic and other requests are both served (mixed traffic), and a
deterministic greedy request gives the same tokens and logprobs twice.
"""
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
