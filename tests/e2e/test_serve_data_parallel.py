"""`detllm serve --data-parallel-size N`: the serve command hands itself to detllm.ray
(python -m detllm.ray serve) — one router on --host/--port, N replicas each given every other
serve option. The session's single server (conftest) is the reference: seeded requests through
the data-parallel endpoint return its bits. A Python that cannot run detllm.ray is a clear error.
"""
import os
import re
import signal
import subprocess
import time

import pytest
import requests

from conftest import API_KEY, DEFAULT_MODEL, find_binary

pytest.importorskip("ray")


def start(binary, *args, env=None):
    return subprocess.Popen([binary, "serve", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def test_data_parallel_serve_returns_the_single_engines_bits(server):
    binary = find_binary()
    if binary is None or not os.path.exists(DEFAULT_MODEL):
        pytest.skip("needs the detllm binary and the default model")
    p = start(binary, "--data-parallel-size", "2", "--num-cpus-per-replica", "0.5", "--host",
              "127.0.0.1", "--port=0", "--api-key", API_KEY, "--model", DEFAULT_MODEL,
              "--threads", "1", "--kv-cache-tokens", "4096")
    try:
        url, lines, deadline = None, [], time.time() + 240
        while url is None and time.time() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"detllm router: listening on (http://\S+)", line)
            url = m.group(1) if m else None
        assert url, "the router did not start:\n" + "".join(lines[-20:])
        headers = {"Authorization": f"Bearer {API_KEY}"}
        # The router's key is the one given: without it, 401.
        assert requests.get(url + "/v1/models", timeout=30).status_code == 401
        served_by = set()
        for i in range(6):
            body = {"prompt": f"Item {i}: a list of fruit", "max_tokens": 6, "seed": 70 + i,
                    "temperature": 0.7, "logprobs": 1}
            a = requests.post(url + "/v1/completions", json=body, headers=headers, timeout=120)
            b = requests.post(server.base + "/v1/completions", json=body, headers=headers,
                              timeout=120)
            assert a.status_code == 200, a.text
            ca, cb = a.json()["choices"][0], b.json()["choices"][0]
            assert ca["logprobs"]["token_ids"] == cb["logprobs"]["token_ids"]
            assert ca["logprobs"]["token_logprobs"] == cb["logprobs"]["token_logprobs"]
            assert a.json()["system_fingerprint"] == b.json()["system_fingerprint"]
            served_by.add(a.json()["replica"])
        assert served_by <= {"r0", "r1"} and served_by
    finally:
        os.killpg(p.pid, signal.SIGINT)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            raise


def test_a_python_without_detllm_ray_is_a_clear_error(tmp_path):
    binary = find_binary()
    if binary is None:
        pytest.skip("needs the detllm binary")
    env = dict(os.environ, DETLLM_PYTHON=str(tmp_path / "no-such-python"))
    p = start(binary, "--data-parallel-size", "2", env=env)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1
    assert "DETLLM_PYTHON" in err and "pip install" in err, err
