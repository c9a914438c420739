"""SIGTERM: the server stops taking requests, lets in-flight ones finish (bounded by
--drain-timeout, after which they are aborted), and exits with status 0."""
import json
import signal
import socket
import threading
import time

import requests

from conftest import API_KEY, start_server, wait_until


def stream_in_thread(server, body, out):
    def run():
        data = json.dumps(body).encode()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=120) as s:
            s.sendall(head + data)
            buf = b""
            while True:
                try:
                    chunk = s.recv(4096)
                except OSError:
                    break
                if not chunk:
                    break
                buf += chunk
                if b"data: " in buf:
                    out["started"] = True
        out["body"] = buf

    t = threading.Thread(target=run)
    t.start()
    return t


def wait_started(out, timeout=60):
    assert wait_until(lambda: out.get("started"), timeout=timeout, interval=0.05), \
        "the stream never started"


def test_sigterm_drains_in_flight_requests():
    server = start_server("--drain-timeout", "60")
    out = {}
    t = stream_in_thread(server, {"model": "default", "prompt": "Tell me about rivers.",
                                  "max_tokens": 24, "ignore_eos": True, "stream": True}, out)
    wait_started(out)
    server.proc.send_signal(signal.SIGTERM)
    assert wait_until(lambda: any("draining" in line for line in server.log), timeout=30), \
        "".join(server.log)
    # Draining: new work is refused (503), or the listener is already closed. Only a refused
    # connection is allowed through; any answer must be the 503.
    try:
        r = server.post("/v1/completions", {"model": "default", "prompt": "x", "max_tokens": 1},
                        timeout=10)
    except requests.ConnectionError:
        pass  # the listener is closed: refused as well
    else:
        assert r.status_code == 503, (r.status_code, r.text)
    t.join(120)
    # Chunked transfer encoding: the last data chunk holds [DONE], then the empty chunk.
    assert out["body"].endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), out["body"][-300:]
    assert server.proc.wait(60) == 0
    assert any("draining" in line for line in server.log)


def test_sigterm_aborts_after_the_drain_timeout():
    server = start_server("--drain-timeout", "1")
    out = {}
    t = stream_in_thread(server, {"model": "default", "prompt": "An endless tale.",
                                  "max_tokens": 4000, "ignore_eos": True, "stream": True}, out)
    wait_started(out)
    start = time.time()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(30) == 0
    assert time.time() - start < 15
    t.join(30)
    # The aborted stream still ends cleanly: its last choice chunk says why.
    assert b'"finish_reason":"abort"' in out["body"], out["body"][-300:]
    assert any("aborting" in line for line in server.log)
