"""Hostile clients against `detllm serve`, over raw loopback sockets (docs/server.md).

Each case is bounded in connections and time. After each one the server must still answer
/health within 1 s, and /metrics, /proc/PID/fd and RSS must show nothing left behind: no
connection, in-flight request, running sequence or used KV block above the baseline.

The cases: port ownership; the body of a request refused for its API key is read, never
parsed as the next request; limits on chunked bodies; pipelining; slow headers; request
smuggling (two Content-Lengths, Content-Length with chunked, other codings); oversized and
too many headers; NUL bytes in a body and in Authorization; log injection; half-closed
connections; a thousand idle connections; a client that never reads its SSE stream; prompt
shutdown; 405 for a known path with another method.

DETLLM_HOSTILE_LEGACY=1 starts the server without the options the old HTTP layer lacked
(--header-timeout, --write-timeout, ...), to run the same cases against an older binary.
"""
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest
import requests

from conftest import API_KEY, DEFAULT_MODEL, find_binary, start_server, wait_until

LEGACY = os.environ.get("DETLLM_HOSTILE_LEGACY") == "1"
MAX_BODY = 65536
HEADER_TIMEOUT = 2
WRITE_TIMEOUT = 2
HTTP_THREADS = 4


def hostile_args():
    args = ["--max-body-bytes", str(MAX_BODY), "--http-threads", str(HTTP_THREADS),
            "--keep-alive-timeout", "2", "--log-requests"]
    if not LEGACY:
        args += ["--header-timeout", str(HEADER_TIMEOUT), "--request-timeout", "4",
                 "--write-timeout", str(WRITE_TIMEOUT)]
    return args


@pytest.fixture(scope="module")
def hs():
    s = start_server(*hostile_args())
    yield s
    s.stop()


# ---- raw HTTP -----------------------------------------------------------------------------

def connect(server, timeout=5.0, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(("127.0.0.1", server.port))
    return s


def request_bytes(method, path, body=b"", headers=(), auth=True, length=True):
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if auth:
        lines.append(f"Authorization: Bearer {API_KEY}")
    lines += list(headers)
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def json_post(path, obj, **kw):
    return request_bytes("POST", path, json.dumps(obj).encode(),
                         headers=["Content-Type: application/json"], **kw)


class Reader:
    """Parses HTTP/1.1 responses (Content-Length or chunked) from a socket."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.closed = False

    def _fill(self):
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            data = b""
        if not data:
            self.closed = True
        self.buf += data
        return bool(data)

    def _line(self):
        while b"\r\n" not in self.buf:
            if not self._fill():
                return None
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            if not self._fill():
                return None
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self):
        """(status, headers dict lower-cased, body bytes), or None when the peer closed."""
        status_line = self._line()
        if not status_line:
            return None
        status = int(status_line.split()[1])
        headers = {}
        while True:
            line = self._line()
            if line is None:
                return None
            if line == b"":
                break
            k, v = line.decode("latin-1").split(":", 1)
            headers[k.strip().lower()] = v.strip()
        if status == 100:
            return self.response()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size_line = self._line()
                if size_line is None:
                    return None
                size = int(size_line.split(b";")[0], 16)
                chunk = self._exact(size + 2)
                if chunk is None:
                    return None
                if size == 0:
                    break
                body += chunk[:-2]
            return status, headers, body
        body = self._exact(int(headers.get("content-length", "0"))) or b""
        return status, headers, body

    def at_eof(self, timeout=5.0):
        """True when the server closes the connection within `timeout` (data is dropped)."""
        self.sock.settimeout(timeout)
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if not self.sock.recv(65536):
                    return True
            except ConnectionResetError:
                return True
            except socket.timeout:
                return False
        return False


def exchange(server, data, n_responses=1, timeout=5.0):
    with connect(server, timeout) as s:
        s.sendall(data)
        r = Reader(s)
        out = []
        for _ in range(n_responses):
            resp = r.response()
            if resp is None:
                break
            out.append(resp)
        return out


# ---- health and leaks ---------------------------------------------------------------------

def proc_facts(server):
    pid = server.proc.pid
    n_fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss_kb = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
    return n_fds, rss_kb


def gauges(server):
    m = server.metrics()
    return {k: m.get(k, 0.0) for k in (
        "detllm_http_connections", "detllm_http_requests_in_flight",
        "detllm_running_sequences", "detllm_kv_blocks_used", "detllm_engine_requests")}


@pytest.fixture
def baseline(hs):
    # Earlier cases' sockets must be gone before the baseline is taken.
    time.sleep(0.2)
    g = gauges(hs)
    fds, rss = proc_facts(hs)
    yield {"gauges": g, "fds": fds, "rss": rss}
    assert_recovered(hs, {"gauges": g, "fds": fds, "rss": rss})


def assert_recovered(server, base):
    assert server.proc.poll() is None, "the server died:\n" + "".join(server.log[-30:])
    t0 = time.time()
    # Connection: close, so that this check's own connection is not still open (until the
    # 2 s keep-alive timeout) when the gauges are compared below.
    r = requests.get(server.base + "/health", timeout=1.0, headers={"Connection": "close"})
    assert r.status_code == 200 and time.time() - t0 < 1.0
    def settled():
        g = gauges(server)
        return all(g[k] <= base["gauges"][k] for k in g)
    assert wait_until(settled, timeout=10), (gauges(server), base["gauges"])
    assert wait_until(lambda: proc_facts(server)[0] <= base["fds"] + 2, timeout=10), \
        (proc_facts(server), base)
    assert proc_facts(server)[1] < base["rss"] + 200 * 1024, "RSS grew by more than 200 MiB"


def counter(server, name, labels):
    return server.metrics().get(f"{name}{{{labels}}}", 0.0)


# ---- the cases ----------------------------------------------------------------------------

def test_port_is_owned_exclusively(hs, baseline):
    """A second server on a port that one holds must refuse to start, with a clear message."""
    proc = subprocess.run(
        [find_binary(), "serve", "--host", "127.0.0.1", "--port", str(hs.port),
         "--threads", "1", "--no-self-check", "--model", DEFAULT_MODEL],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "in use" in proc.stderr, proc.stderr
    # Every request still reaches the first server (which requires the key).
    for _ in range(8):
        assert requests.get(hs.base + "/v1/models", timeout=5).status_code == 401


def test_refused_auth_body_is_not_a_request(hs, baseline):
    """A request with a body and without the key is answered 401 from its header alone, and
    the connection closes: its body is never read, never parsed as the next request."""
    health_before = counter(hs, "detllm_requests_total", 'endpoint="/health",status="200"')
    refused_before = counter(hs, "detllm_requests_total",
                             'endpoint="/v1/completions",status="401"')
    smuggled = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    first = request_bytes("POST", "/v1/completions", smuggled, auth=False,
                          headers=["Authorization: Bearer wrong"])
    with connect(hs) as s:
        s.sendall(first)
        r = Reader(s)
        a = r.response()
        assert r.at_eof(), "the connection stays open after a refused request with a body"
    assert a is not None and a[0] == 401, a
    assert a[1].get("connection", "").lower() == "close"
    assert counter(hs, "detllm_requests_total",
                   'endpoint="/health",status="200"') == health_before
    assert counter(hs, "detllm_requests_total",
                   'endpoint="/v1/completions",status="401"') == refused_before + 1
    # Without a body, a refused request leaves the connection open for the next one.
    with connect(hs) as s:
        s.sendall(request_bytes("GET", "/v1/models", auth=False))
        r = Reader(s)
        assert r.response()[0] == 401
        s.sendall(request_bytes("GET", "/v1/models"))
        b = r.response()
    assert b is not None and b[0] == 200 and b"object" in b[2], b


def send_in_background(sock, head, piece, total):
    """Sends `head`, then `piece` until `total` bytes, on a thread; stops when the peer closes."""
    sent = [0]

    def run():
        try:
            sock.sendall(head)
            while sent[0] < total:
                sock.sendall(piece)
                sent[0] += len(piece)
        except OSError:
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, sent


TRAILER_LINE = b"X-Pad: " + b"a" * 1015 + b"\r\n"  # 1 KiB a field


@pytest.mark.parametrize("auth", [True, False])
def test_chunked_trailer_is_bounded(hs, baseline, auth):
    """After the last chunk, a trailer section of 256 MiB (with the key: 431 once the
    connection's 64 KiB read buffer is full) or of 1 GiB (without it: 401 from the header, the
    body never read) leaves the server's RSS within 64 MiB of its baseline."""
    head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
            + (f"Authorization: Bearer {API_KEY}\r\n" if auth else "")
            + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "2\r\n{}\r\n0\r\n").encode()
    total = (256 if auth else 1024) << 20
    peak = [0]
    with connect(hs, timeout=20) as s:
        t, sent = send_in_background(s, head, TRAILER_LINE * 64, total)
        resp = Reader(s).response()
        # Sample the RSS while the client still sends (or until the server has closed on it).
        for _ in range(20):
            peak[0] = max(peak[0], proc_facts(hs)[1])
            if not t.is_alive():
                break
            time.sleep(0.05)
        t.join(30)
    assert resp is not None, "no answer"
    if auth:
        assert resp[0] == 431, resp
        assert b"trailer" in resp[2], resp[2]
    else:
        assert resp[0] == 401, resp
    assert resp[1].get("connection", "").lower() == "close"
    assert sent[0] < total, "the server read the whole trailer"
    peak[0] = max(peak[0], proc_facts(hs)[1])
    assert peak[0] < baseline["rss"] + 64 * 1024, (peak[0], baseline["rss"])


def test_folded_header_is_refused(hs, baseline):
    """obs-fold (a header continued on the next line) is refused with 400 (RFC 9112 5.2)."""
    body = b'{"prompt": "Hi", "max_tokens": 1}'
    data = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length:\r\n {len(body)}\r\n\r\n"
            ).encode() + body
    out = exchange(hs, data)
    assert out and out[0][0] == 400, out
    assert b"obs-fold" in out[0][2]


def test_absolute_form_target_is_served(hs, baseline):
    """RFC 9112 3.2.2: a server must accept a request-target in absolute form."""
    out = exchange(hs, b"GET http://127.0.0.1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert out and out[0][0] == 200, out
    out = exchange(hs, request_bytes("GET", f"HTTP://127.0.0.1:{hs.port}/v1/models?x=1"))
    assert out and out[0][0] == 200 and b"object" in out[0][2], out


def test_http_1_0_keep_alive_is_honoured_for_post(hs, baseline):
    """A generation's whole JSON body (streamed out of the engine) is sent to an HTTP/1.0
    keep-alive client with its Content-Length, and the connection stays open."""
    body = json.dumps({"prompt": "Hi", "max_tokens": 2, "temperature": 0}).encode()
    one = (f"POST /v1/completions HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
           f"Connection: keep-alive\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    with connect(hs) as s:
        r = Reader(s)
        for _ in range(2):
            s.sendall(one)
            resp = r.response()
            assert resp is not None and resp[0] == 200, resp
            assert resp[1].get("connection", "").lower() == "keep-alive", resp[1]
            assert int(resp[1]["content-length"]) == len(resp[2])
            assert json.loads(resp[2])["choices"][0]["text"]


def test_openai_client_with_a_wrong_key_gets_401(hs, baseline):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=hs.base + "/v1", api_key="wrong", max_retries=0, timeout=30)
    with client:  # closed at the end, so its keep-alive connection is gone before the teardown
        for _ in range(10):
            with pytest.raises(openai.AuthenticationError):
                client.completions.create(model="default", prompt="hello", max_tokens=2)


def test_chunked_body_over_the_limit_is_413(hs, baseline):
    """--max-body-bytes holds for chunked bodies too; the server stops reading early."""
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    chunk = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"
    with connect(hs, timeout=10) as s:
        s.sendall(head)
        sent = [0]

        def send():
            try:
                for _ in range(512):  # 32 MiB
                    s.sendall(chunk)
                    sent[0] += len(chunk)
            except OSError:
                pass

        t = threading.Thread(target=send, daemon=True)
        t.start()
        resp = Reader(s).response()
        t.join(20)
    assert resp is not None and resp[0] == 413, resp
    assert json.loads(resp[2])["error"]["code"] == "request_too_large"
    assert resp[1].get("connection", "").lower() == "close"


def test_pipelined_requests_all_answered_in_order(hs, baseline):
    data = b"".join([request_bytes("GET", "/health"),
                     json_post("/tokenize", {"prompt": "one two"}),
                     request_bytes("GET", "/v1/models/default"),
                     json_post("/v1/completions", {"prompt": "Hi", "max_tokens": 1,
                                                   "temperature": 0}),
                     request_bytes("GET", "/nope")])
    t0 = time.time()
    out = exchange(hs, data, n_responses=5, timeout=10)
    assert [r[0] for r in out] == [200, 200, 200, 200, 404], out
    assert json.loads(out[1][2])["count"] >= 2
    assert json.loads(out[2][2])["id"] == "default"
    assert json.loads(out[3][2])["usage"]["completion_tokens"] == 1
    # No answer waits for a timeout (the keep-alive one is 2 s); one token, one engine step
    # (up to 3.5 s at load 18 here: see test_nul_bytes_are_refused).
    assert time.time() - t0 < 5


def slow_sender(server, n_bytes, stop):
    """Sends a request header one byte per second; returns what the server answered."""
    data = request_bytes("GET", "/health")
    out = {"closed": False, "status": None}
    try:
        with connect(server, timeout=1) as s:
            for i in range(min(n_bytes, len(data) - 1)):
                if stop.is_set():
                    break
                try:
                    s.sendall(data[i:i + 1])
                except OSError:
                    out["closed"] = True
                    break
                try:
                    got = s.recv(4096)
                    if not got:
                        out["closed"] = True
                        break
                    out["status"] = int(got.split()[1])
                    out["closed"] = Reader(s).at_eof(3)
                    break
                except socket.timeout:
                    pass
    except OSError:
        out["closed"] = True
    return out


def test_slow_headers_are_timed_out_and_block_nobody(hs, baseline):
    """More slow-header clients than worker threads: /health still answers in under 1 s and
    the server cuts them off after --header-timeout."""
    stop = threading.Event()
    results = []

    def run():
        results.append(slow_sender(hs, 30, stop))

    threads = [threading.Thread(target=run) for _ in range(2 * HTTP_THREADS)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        for _ in range(3):
            t0 = time.time()
            assert requests.get(hs.base + "/health", timeout=1.0).status_code == 200
            assert time.time() - t0 < 1.0
            time.sleep(0.3)
    finally:
        for t in threads:
            t.join(HEADER_TIMEOUT + 15)
        stop.set()
    assert len(results) == len(threads)
    assert all(r["closed"] for r in results), results
    assert all(r["status"] in (None, 408) for r in results), results


@pytest.mark.parametrize("framing", [
    ["Content-Length: 5", "Content-Length: 40"],
    ["Content-Length: 40", "Transfer-Encoding: chunked"],
    ["Transfer-Encoding: chunked", "Content-Length: 40"],
    ["Transfer-Encoding: gzip, chunked"],
    ["Transfer-Encoding: chunked", "Transfer-Encoding: identity"],
    ["Content-Length: -5"],
    ["Content-Length: 5x"],
])
def test_smuggling_framing_is_refused(hs, baseline, framing):
    """Framing that two parsers could read differently gets a 400 and the connection closes:
    the bytes after it are never run as a request."""
    label = 'endpoint="/v1/models/{id}",status="404"'
    before = counter(hs, "detllm_requests_total", label)
    hidden = b"GET /v1/models/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    body = b"0\r\n\r\n" + hidden
    data = request_bytes("POST", "/tokenize", body, headers=framing, length=False)
    with connect(hs) as s:
        s.sendall(data)
        r = Reader(s)
        first = r.response()
        assert first is not None and first[0] == 400, first
        assert r.response() is None  # nothing else: the connection is closed
    time.sleep(0.2)
    assert counter(hs, "detllm_requests_total", label) == before


def test_oversized_header_is_431(hs, baseline):
    out = exchange(hs, request_bytes("GET", "/health", headers=["X-Big: " + "a" * 20000]))
    assert out and out[0][0] == 431, out


def test_too_many_headers_is_431(hs, baseline):
    out = exchange(hs, request_bytes("GET", "/health",
                                     headers=[f"X-H{i}: v" for i in range(300)]))
    assert out and out[0][0] == 431, out


def test_nul_bytes_are_refused(hs, baseline):
    body = b'{"prompt": "hi", "max_tokens": 1}\x00garbage'
    out = exchange(hs, request_bytes("POST", "/v1/completions", body,
                                     headers=["Content-Type: application/json"]))
    assert out and out[0][0] == 400, out
    assert b"NUL" in out[0][2]
    auth = request_bytes("GET", "/v1/models", auth=False,
                         headers=["Authorization: Bearer " + API_KEY + "\x00anything"])
    out = exchange(hs, auth)
    assert out and out[0][0] in (400, 401), out
    out = exchange(hs, json_post("/v1/completions", {"prompt": "hi", "user": 5}))
    assert out and out[0][0] == 400 and b"user" in out[0][2], out
    # A long `user` (within 1 MiB and the body limit) is accepted. The case is about parsing,
    # which costs milliseconds (a 1 MiB body is read and parsed in ~30 ms), so it asks for one
    # greedy token, not the default 16 sampled ones; and, as every case here that waits for
    # the engine, it allows 30 s: one engine step is not the HTTP layer's time, and took up to
    # 3.5 s (45 s for the 16 tokens) with 2 engine threads on this 2-core machine at load 18
    # (docs/server.md, "Tests and load").
    big_user = json_post("/v1/completions", {"prompt": "hi", "max_tokens": 1, "temperature": 0,
                                             "user": "u" * (MAX_BODY - 100)})
    out = exchange(hs, big_user, timeout=30)
    assert out and out[0][0] == 200, out
    assert json.loads(out[0][2])["usage"]["completion_tokens"] == 1


def test_log_lines_cannot_be_forged(hs, baseline):
    n = len(hs.log)
    exchange(hs, request_bytes("GET", "/x%0d%0aFORGED-LINE%20200"))
    exchange(hs, request_bytes("GET", "/y\x1b[2J"))
    time.sleep(0.3)
    new = hs.log[n:]
    assert not any(line.startswith("FORGED") for line in new), new
    assert any("/x%0d%0aFORGED-LINE%20200" in line for line in new), new
    assert not any("\x1b" in line for line in new), new


def test_log_lines_carry_latency_and_tokens(hs, baseline):
    n = len(hs.log)
    out = exchange(hs, json_post("/v1/completions", {"prompt": "Hi", "max_tokens": 3,
                                                     "temperature": 0}), timeout=30)
    assert out and out[0][0] == 200
    # The log line is written after the response, and read by the fixture's reader thread: on a
    # loaded machine that can take seconds (a CI dry run saw nothing within 5 s). wait_until
    # returns as soon as the line is there.
    assert wait_until(lambda: any("completion_tokens=3" in l for l in hs.log[n:]), timeout=30), \
        hs.log[n:]
    line = next(l for l in hs.log[n:] if "completion_tokens=3" in l)
    assert '"POST /v1/completions" 200 ' in line and "prompt_tokens=" in line
    assert line.split('" 200 ')[1].split()[0].endswith("s")


def test_answered_then_closed_at_once_is_served_not_a_disconnect(hs, baseline):
    # The client reads the whole answer and closes straight away, as most clients do. The server
    # may see that close before its own write of the last chunk completes: the request is still
    # served (counted under its status, logged), never counted as a client that left early.
    # A loaded machine lost the log line of 2 such exchanges in 3 CI runs before this was fixed.
    key = 'detllm_requests_total{endpoint="/v1/completions",status="200"}'
    m0 = hs.metrics()
    n_log = len(hs.log)
    rounds = 40
    for _ in range(rounds):
        out = exchange(hs, json_post("/v1/completions", {"prompt": "Hi", "max_tokens": 1,
                                                         "temperature": 0}), timeout=30)
        assert out and out[0][0] == 200
    def lines():
        return sum('"POST /v1/completions" 200 ' in l for l in hs.log[n_log:])
    assert wait_until(lambda: lines() == rounds, timeout=30), hs.log[n_log:]
    m1 = hs.metrics()
    assert m1[key] - m0.get(key, 0.0) == rounds
    assert m1["detllm_client_disconnects_total"] == m0["detllm_client_disconnects_total"]


def test_half_closed_connections(hs, baseline):
    # A whole request, then FIN: the answer still comes, then the server closes.
    with connect(hs) as s:
        s.sendall(request_bytes("GET", "/health"))
        s.shutdown(socket.SHUT_WR)
        r = Reader(s)
        resp = r.response()
        assert resp is not None and resp[0] == 200
        assert r.at_eof(5)
    # FIN in the middle of a header: closed without an answer.
    with connect(hs) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHo")
        s.shutdown(socket.SHUT_WR)
        assert Reader(s).at_eof(5)
    # FIN while a generation streams: the client is gone, the request is aborted.
    with connect(hs) as s:
        s.sendall(json_post("/v1/completions", {"prompt": "Once", "max_tokens": 400,
                                                "ignore_eos": True, "stream": True}))
        assert s.recv(100)
        s.shutdown(socket.SHUT_WR)
        assert wait_until(lambda: gauges(hs)["detllm_running_sequences"] == 0, timeout=10)


def test_a_thousand_idle_connections(hs, baseline):
    socks = []
    try:
        for _ in range(1000):
            socks.append(connect(hs, timeout=5))
        t0 = time.time()
        assert requests.get(hs.base + "/health", timeout=1.0).status_code == 200
        assert time.time() - t0 < 1.0
        # A real request is served too.
        out = exchange(hs, json_post("/tokenize", {"prompt": "x"}))
        assert out and out[0][0] == 200
    finally:
        for s in socks:
            s.close()


def test_client_that_never_reads_its_stream(hs, baseline):
    """Back-pressure: the server holds one chunk at a time, then cuts the client off."""
    aborted = hs.metrics().get("detllm_aborted_requests_total", 0)
    s = connect(hs, timeout=5, rcvbuf=4096)
    try:
        # 16 choices with top-20 logprobs: ~36 KB of SSE per engine step, so the kernel's
        # socket buffers (~4 MB on loopback) fill after ~110 of the 450 steps and the
        # server's writes stall.
        s.sendall(json_post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Tell me a story."}], "n": 16,
            "max_tokens": 450, "ignore_eos": True, "stream": True, "logprobs": True,
            "top_logprobs": 20}))
        assert wait_until(lambda: gauges(hs)["detllm_running_sequences"] >= 1, timeout=20)
        # Never read. An abort before the 450 steps are done is the write timeout cutting
        # the silent client off (a finished request is not counted as aborted).
        assert wait_until(lambda: hs.metrics().get("detllm_aborted_requests_total", 0) > aborted,
                          timeout=120), gauges(hs)
        assert hs.metrics().get("detllm_http_timeouts_total", 0) >= 1
        # Bounded memory: the request's own events at most, never an unbounded buffer.
        assert proc_facts(hs)[1] < baseline["rss"] + 200 * 1024
    finally:
        s.close()


def test_get_on_a_post_route_is_405(hs, baseline):
    out = exchange(hs, request_bytes("GET", "/v1/completions"))
    assert out and out[0][0] == 405
    assert out[0][1].get("allow") == "POST"


def test_shutdown_is_prompt_with_idle_keep_alive_connections():
    s = start_server(*hostile_args())
    idle = []
    try:
        for _ in range(3):
            c = connect(s)
            c.sendall(request_bytes("GET", "/health"))
            assert Reader(c).response()[0] == 200
            idle.append(c)  # kept open, idle
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(timeout=30)
        took = time.time() - t0
    finally:
        for c in idle:
            c.close()
        s.stop()
    assert s.proc.returncode == 0
    assert took < 1.5, f"shutdown took {took:.2f} s"


def test_http_1_0_stream_is_not_chunked(hs, baseline):
    """HTTP/1.0 has no chunked encoding: a streamed body ends with the connection."""
    body = json.dumps({"prompt": "Hi", "max_tokens": 3, "stream": True,
                       "temperature": 0}).encode()
    data = (f"POST /v1/completions HTTP/1.0\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with connect(hs, timeout=30) as s:
        s.sendall(data + body)
        raw = b""
        while True:
            got = s.recv(65536)
            if not got:
                break
            raw += got
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200"), head
    assert b"transfer-encoding" not in head.lower()
    assert payload.startswith(b"data: {") and payload.endswith(b"data: [DONE]\n\n"), payload
