"""The startup self-check from the outside (design.md Rule 3): `detllm check` on the default
model prints one line per check and exits 0; `detllm serve` reports the result on stderr and in
/metrics and /health; --no-self-check shows as "disabled". `detllm check --proof` runs the
bounded model checker of the engine (src/verify/model_check) and says what it proved.
(A failing check cannot be injected into the binary; tests/server/self_check_server_test.cpp
covers the refusal and its HTTP 503 at the handler level.)
"""
import os
import subprocess

import pytest

from conftest import DEFAULT_MODEL, ROOT, find_binary, start_server


def run_detllm(*args, timeout=300):
    binary = find_binary()
    if binary is None:
        pytest.skip("the detllm binary is not built (set DETLLM_BIN)")
    return subprocess.run([binary, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_check_command_passes_and_prints_the_table():
    if not os.path.exists(DEFAULT_MODEL):
        pytest.skip("the default model is not installed (scripts/setup.sh)")
    r = run_detllm("check", "--threads", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("check") and "status" in lines[0], r.stdout
    rows = [l for l in lines[1:-1]]
    names = [l.split("  ")[0] for l in rows]
    assert any(n.startswith("gemm ") and "lm_head" in n for n in names), r.stdout
    assert any(n.startswith("attention ") for n in names), r.stdout
    assert any(n.startswith("rmsnorm ") for n in names), r.stdout
    assert all(" ok " in l for l in rows), r.stdout
    assert "checks passed" in lines[-1], r.stdout


def test_check_help_explains_it():
    r = run_detllm("check", "--help", timeout=30)
    assert r.returncode == 0
    assert "self-check" in r.stdout and "exit code" in r.stdout


def test_check_proof_proves_the_ci_bound():
    r = run_detllm("check", "--proof", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("Proved"), r.stdout
    assert "complete (no path reached the event bound)" in r.stdout, r.stdout
    assert "bounded (paths cut" not in r.stdout, r.stdout
    assert "Assumed (not proved here)" in r.stdout, r.stdout
    # The reduction-order analyzer follows, at its CI bound.
    assert "reduction orders (ci bound)" in r.stdout, r.stdout
    assert "FAILED" not in r.stdout, r.stdout
    assert "PROVED tensor-core attention" in r.stdout, r.stdout
    assert "not analyzable: the inside of a cuBLASLt kernel" in r.stdout, r.stdout


def test_check_proof_orders_alone():
    r = run_detllm("check", "--proof", "--proof-part", "orders", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("reduction orders"), r.stdout
    assert "Proved" not in r.stdout, r.stdout  # the engine's model checker did not run


def test_check_proof_says_when_the_event_bound_cut_paths():
    r = run_detllm("check", "--proof", "--proof-events", "3", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bounded (paths cut at the event bound)" in r.stdout, r.stdout


def test_serve_reports_passed(server):
    assert any("self-check:" in l and "checks passed" in l for l in server.log), "".join(server.log)
    m = server.metrics()
    assert m['detllm_self_check_status{state="passed"}'] == 1
    assert server.get("/health").json()["self_check"] == "passed"


def test_serve_no_self_check_is_disabled():
    s = start_server("--no-self-check")
    try:
        assert s.metrics()['detllm_self_check_status{state="disabled"}'] == 0
        r = s.post("/v1/completions", {"model": "default", "prompt": "Hi", "max_tokens": 1})
        assert r.status_code == 200, r.text
    finally:
        assert s.stop() == 0, "".join(s.log)
