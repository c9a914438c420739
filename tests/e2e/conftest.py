"""Fixtures for the end-to-end tests of `detllm serve`.

The server under test is the real binary ($DETLLM_BIN, set by CTest; else the first of
build*/detllm found) serving the embedded default model on a free loopback port (--port 0;
the bound port is read from its log). One server is shared by the session; tests that stop
a server start their own with `start_server`.
"""
import glob
import os
import re
import signal
import subprocess
import threading
import time

import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
API_KEY = "e2e-secret-key"
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def find_binary():
    env = os.environ.get("DETLLM_BIN")
    if env:
        return env
    # build/ (scripts/build.sh's) first: "build-x/" sorts before "build/".
    for path in [os.path.join(ROOT, "build", "detllm"),
                 *sorted(glob.glob(os.path.join(ROOT, "build*", "detllm")))]:
        if os.access(path, os.X_OK):
            return path
    return None


class Server:
    """A running `detllm serve` process; its stderr is collected in `log`."""

    def __init__(self, proc, port):
        self.proc = proc
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.log = []

    @property
    def headers(self):
        return {"Authorization": f"Bearer {API_KEY}"}

    def post(self, path, body=None, **kw):
        kw.setdefault("timeout", 120)
        headers = dict(self.headers)
        headers.update(kw.pop("headers", {}))
        return requests.post(self.base + path, json=body, headers=headers, **kw)

    def get(self, path, **kw):
        kw.setdefault("timeout", 60)
        headers = dict(self.headers)
        headers.update(kw.pop("headers", {}))
        return requests.get(self.base + path, headers=headers, **kw)

    def metrics(self):
        """GET /metrics parsed into {name{labels}: value}."""
        text = self.get("/metrics").text
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_server(*extra_args):
    binary = find_binary()
    if binary is None:
        pytest.skip("the detllm binary is not built (set DETLLM_BIN)")
    if not os.path.exists(DEFAULT_MODEL):
        pytest.skip("the default model is not installed (scripts/setup.sh)")
    # Defaults the caller's own options replace (an option given twice is refused).
    defaults = [("--threads", "2"), ("--kv-cache-tokens", "8192"),
                ("--max-tokens-per-step", "1024")]
    args = [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--api-key", API_KEY,
            *[x for k, v in defaults if k not in extra_args for x in (k, v)], *extra_args]
    # backslashreplace: a byte that is not UTF-8 in the server's stderr must not end the reader
    # thread (which would leave server.log silently frozen for every later test).
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, encoding="utf-8", errors="backslashreplace")
    port_holder = {}
    ready = threading.Event()
    log = []

    def reader():
        for line in proc.stderr:
            log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                port_holder["port"] = int(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=reader, daemon=True).start()
    if not ready.wait(120) or "port" not in port_holder:
        proc.kill()
        raise RuntimeError("detllm serve did not start:\n" + "".join(log))
    server = Server(proc, port_holder["port"])
    server.log = log
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if requests.get(server.base + "/health", timeout=5).status_code == 200:
                return server
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("detllm serve never became healthy:\n" + "".join(log))


@pytest.fixture(scope="session")
def server():
    s = start_server()
    yield s
    code = s.stop()
    assert code == 0, "".join(s.log)


@pytest.fixture(scope="session")
def client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0,
                         timeout=300)


def wait_until(predicate, timeout=30.0, interval=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
