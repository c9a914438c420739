"""scripts/gpu/tp_cli_check.py — the device's `--tensor-parallel` check through the CLI on a
random model written on the spot — run here on the CPU backend with the tiny preset, so the
script the H200 runs is itself tested: it must pass, and it must fail when a degree's ids or
fingerprint differ (a wrapper binary that perturbs TP 2's output)."""
import os
import stat
import subprocess
import sys

import pytest

from conftest import ROOT, find_binary

SCRIPT = os.path.join(ROOT, "scripts", "gpu", "tp_cli_check.py")


def check(binary, tmp_path):
    return subprocess.run([sys.executable, SCRIPT, binary, "--backend", "cpu", "--preset", "tiny",
                           "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")],
                          capture_output=True, text=True, timeout=300)


def test_the_check_passes_on_the_cpu(tmp_path):
    binary = find_binary()
    if binary is None:
        pytest.skip("the detllm binary is not built (set DETLLM_BIN)")
    r = check(binary, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASSED: 0 failed" in r.stdout
    assert r.stdout.count("PASS ") >= 12, r.stdout


def test_the_check_fails_when_a_degree_changes_the_fingerprint(tmp_path):
    binary = find_binary()
    if binary is None:
        pytest.skip("the detllm binary is not built (set DETLLM_BIN)")
    # A binary that, at --tensor-parallel 2, prints another fingerprint than the real one.
    fake = tmp_path / "detllm-fake"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'if [[ " $* " == *" --tensor-parallel 2 "* ]]; then\n'
        f'  "{binary}" "$@" 2> >(sed -E "s/fingerprint fp_[0-9a-f]{{16}}/fingerprint fp_0000000000000000/" >&2)\n'
        "  wait; exit 0\n"
        "fi\n"
        f'exec "{binary}" "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    r = check(str(fake), tmp_path)
    assert r.returncode != 0, r.stdout
    assert "FAIL generate TP 2 fingerprint" in r.stdout, r.stdout
