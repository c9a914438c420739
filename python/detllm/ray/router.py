"""One OpenAI-compatible endpoint in front of N `detllm serve` replicas.

The router is a small threaded HTTP/1.1 front (the standard library's, one thread per client
connection) that forwards each request to one replica over a fresh loopback/LAN connection:

- **Routing**: the least-loaded replica (requests in flight through this router), except that
  a request whose prompt starts like an earlier one goes where that one went (prefix affinity:
  the replica's prefix cache holds it) as long as that replica is within `affinity_slack`
  requests of the least loaded.
- **One fingerprint**: only replicas whose numerics fingerprint is the pool's are admitted
  (fingerprint.py); so any replica gives a deterministic request the same bits.
- **Failover**: a replica that fails (connection refused or cut, the process gone, a stream that
  ends without [DONE], or aborted by a draining server) has its deterministic requests re-run on
  another replica with the same seed — the router gives every deterministic request a seed when
  it has none — and a stream goes on from the first token not yet sent (stream_resume.py).
  A non-deterministic request is retried from the start when nothing of it was sent and
  `nondeterministic="retry"`, and otherwise fails with an error naming the replica.
- **Health and draining**: /health of every replica is polled; a replica can be drained (no
  new requests; its deterministic requests move at once when `migrate`).

Every generation response (each streamed chunk too) carries `replica` (who served it; after a
failover the chunks name the new one) and `weight_version`, beside the server's own
`system_fingerprint` and `seed`; the header `X-Detllm-Replica` names the first replica.
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import random
import socket
import threading
import time
import urllib.parse
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple

from .fingerprint import FingerprintMismatch, ReplicaIdentity, check_same, fetch_identity
from .stream_resume import ReplayMismatch, StreamState

GENERATION_PATHS = ("/v1/completions", "/v1/chat/completions")
SEED_LIMIT = 2 ** 53  # the server's own drawn seeds stay below it (any JSON client keeps them)


class ReplicaFailed(Exception):
    """The replica did not answer this attempt (cut, refused, gone, or draining)."""


class Backend:
    """One replica as the router sees it."""

    def __init__(self, name: str, url: str, identity: ReplicaIdentity, weight_version: str):
        u = urllib.parse.urlsplit(url)
        self.name = name
        self.url = url
        self.host, self.port = u.hostname, u.port
        self.identity = identity
        self.weight_version = weight_version
        self.state = "up"  # up | down | draining
        self.in_flight = 0
        self.served = 0
        self.conns: Dict[int, Tuple[http.client.HTTPConnection, bool]] = {}  # id -> (conn, deterministic)

    def status(self) -> dict:
        return {"name": self.name, "url": self.url, "state": self.state,
                "in_flight": self.in_flight, "served": self.served,
                "fingerprint": self.identity.fingerprint, "weight_version": self.weight_version}


class Router:
    def __init__(self, api_key: Optional[str] = None, upstream_api_key: Optional[str] = None,
                 affinity_slack: int = 4, affinity_chars: int = 256,
                 nondeterministic: str = "fail", health_interval: float = 0.5,
                 request_timeout: float = 600.0):
        if nondeterministic not in ("fail", "retry"):
            raise ValueError("nondeterministic must be 'fail' or 'retry'")
        self.api_key = api_key
        self.upstream_api_key = upstream_api_key if upstream_api_key is not None else api_key
        self.affinity_slack = affinity_slack
        self.affinity_chars = affinity_chars
        self.nondeterministic = nondeterministic
        self.health_interval = health_interval
        self.request_timeout = request_timeout
        self.lock = threading.Condition()
        self.backends: Dict[str, Backend] = {}
        self.reference: Optional[Tuple[str, ReplicaIdentity]] = None
        self.affinity: "OrderedDict[str, str]" = OrderedDict()
        self.paused = False  # a weight-update barrier holds new requests
        self.counters = {"requests": 0, "failovers": 0, "failed": 0, "resumed_streams": 0}
        self._rr = 0
        self._stop = threading.Event()
        self.httpd: Optional[ThreadingHTTPServer] = None
        self._threads: List[threading.Thread] = []

    # ----- replicas -----------------------------------------------------------------------
    def add_replica(self, name: str, url: str, weight_version: str = "0",
                    identity: Optional[ReplicaIdentity] = None) -> Backend:
        """Admits a replica, or raises FingerprintMismatch (naming the fields) and admits none."""
        identity = identity or fetch_identity(url, self.upstream_api_key)
        with self.lock:
            if self.reference is None:
                self.reference = (name, identity)
            else:
                check_same(self.reference[0], self.reference[1], name, identity)
            b = Backend(name, url, identity, weight_version)
            self.backends[name] = b
            self.lock.notify_all()
            return b

    def update_replica(self, name: str, url: str, weight_version: Optional[str] = None,
                       identity: Optional[ReplicaIdentity] = None) -> None:
        """A restarted replica (new process, new port): checked like a new one, then up."""
        identity = identity or fetch_identity(url, self.upstream_api_key)
        with self.lock:
            ref = self.reference
            others = [b for b in self.backends.values() if b.name != name]
            if ref is not None and (others or ref[0] != name):
                check_same(ref[0], ref[1], name, identity)
            else:
                self.reference = (name, identity)
            b = self.backends[name]
            u = urllib.parse.urlsplit(url)
            b.url, b.host, b.port, b.identity = url, u.hostname, u.port, identity
            if weight_version is not None:
                b.weight_version = weight_version
            b.state = "up"
            self.lock.notify_all()

    def remove_replica(self, name: str) -> None:
        with self.lock:
            self.backends.pop(name, None)
            if not self.backends:
                self.reference = None

    def replace_reference(self, name: str, identity: ReplicaIdentity) -> None:
        """After a weight update: the pool's fingerprint becomes this replica's."""
        with self.lock:
            self.reference = (name, identity)

    def drain(self, name: str, migrate: bool = True) -> None:
        """No new request goes to `name`; with migrate its deterministic requests move now."""
        with self.lock:
            b = self.backends[name]
            b.state = "draining"
            moving = [c for c, det in b.conns.values() if det] if migrate else []
        for conn in moving:
            _cut(conn)

    def undrain(self, name: str) -> None:
        with self.lock:
            self.backends[name].state = "up"
            self.lock.notify_all()

    def pause(self, timeout: float = 600.0) -> None:
        """Holds new requests and waits until none is in flight (the weight-update barrier)."""
        with self.lock:
            self.paused = True
            deadline = time.time() + timeout
            while any(b.in_flight for b in self.backends.values()):
                left = deadline - time.time()
                if left <= 0:
                    self.paused = False
                    self.lock.notify_all()
                    raise TimeoutError("requests still in flight after the barrier's timeout")
                self.lock.wait(left)

    def resume(self) -> None:
        with self.lock:
            self.paused = False
            self.lock.notify_all()

    def status(self) -> dict:
        with self.lock:
            return {"replicas": [b.status() for b in self.backends.values()],
                    "fingerprint": self.reference[1].fingerprint if self.reference else None,
                    "paused": self.paused, **self.counters}

    # ----- choosing -----------------------------------------------------------------------
    def _prefix_key(self, path: str, body: dict) -> Optional[str]:
        if path.endswith("/chat/completions"):
            msgs = body.get("messages")
            if not isinstance(msgs, list):
                return None
            text = "".join(json.dumps(m.get("content"), sort_keys=True)
                           for m in msgs if isinstance(m, dict))
        else:
            p = body.get("prompt")
            if isinstance(p, list) and p and not isinstance(p[0], int):
                p = p[0]
            text = p if isinstance(p, str) else json.dumps(p)[:self.affinity_chars * 4]
        if not text:
            return None
        return hashlib.blake2b(text[:self.affinity_chars].encode(), digest_size=8).hexdigest()

    def _choose(self, key: Optional[str], fingerprint: Optional[str],
                exclude: set) -> Backend:
        """Least-loaded up replica with the fingerprint (affinity first); waits while paused."""
        with self.lock:
            while self.paused:
                self.lock.wait()
            cands = [b for b in self.backends.values()
                     if b.state == "up" and b.name not in exclude
                     and (fingerprint is None or b.identity.fingerprint == fingerprint)]
            if not cands:
                raise ReplicaFailed("no replica is up" if fingerprint is None else
                                    f"no other replica with fingerprint {fingerprint} is up")
            least = min(b.in_flight for b in cands)
            chosen = None
            if key is not None and key in self.affinity:
                b = self.backends.get(self.affinity[key])
                if b in cands and b.in_flight <= least + self.affinity_slack:
                    chosen = b
            if chosen is None:
                ties = [b for b in cands if b.in_flight == least]
                self._rr += 1
                chosen = ties[self._rr % len(ties)]
            if key is not None:
                self.affinity[key] = chosen.name
                self.affinity.move_to_end(key)
                while len(self.affinity) > 65536:
                    self.affinity.popitem(last=False)
            chosen.in_flight += 1
            return chosen

    def _release(self, b: Backend, conn_id: Optional[int]) -> None:
        with self.lock:
            b.in_flight -= 1
            b.served += 1
            if conn_id is not None:
                b.conns.pop(conn_id, None)
            self.lock.notify_all()

    def _failed(self, b: Backend) -> None:
        """A request saw `b` fail: take it out until its /health answers again."""
        with self.lock:
            if b.state == "up":
                b.state = "down"
            self.counters["failovers"] += 1

    # ----- health -------------------------------------------------------------------------
    def _health_loop(self) -> None:
        while not self._stop.wait(self.health_interval):
            with self.lock:
                backends = list(self.backends.values())
            for b in backends:
                if b.state == "draining":
                    continue
                ok = False
                try:
                    c = http.client.HTTPConnection(b.host, b.port, timeout=2)
                    c.request("GET", "/health")
                    r = c.getresponse()
                    r.read()
                    ok = r.status == 200
                    c.close()
                except OSError:
                    ok = False
                if ok and b.state == "down":
                    # Back up (restarted?): it must still have the pool's fingerprint.
                    try:
                        ident = fetch_identity(b.url, self.upstream_api_key, timeout=5)
                    except OSError:
                        continue
                    with self.lock:
                        if self.reference and ident.fingerprint == self.reference[1].fingerprint:
                            b.identity = ident
                            b.state = "up"
                            self.lock.notify_all()
                elif not ok and b.state == "up":
                    with self.lock:
                        b.state = "down"

    # ----- serving ------------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        router = self

        class Handler(_Handler):
            pass

        Handler.router = router
        self.httpd = _Server((host, port), Handler)
        self._threads = [threading.Thread(target=self.httpd.serve_forever, daemon=True),
                         threading.Thread(target=self._health_loop, daemon=True)]
        for t in self._threads:
            t.start()
        return self.url

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._stop.set()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


def _cut(conn: http.client.HTTPConnection) -> None:
    try:
        if conn.sock is not None:
            conn.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _error_body(status: int, message: str, code: str, type_: str = "replica_error") -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "param": None,
                                 "code": code}}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    router: Router = None  # set per server
    server_version = "detllm-router"

    def log_message(self, fmt, *args):  # quiet: the replicas log requests
        pass

    # --- plumbing
    def _send(self, status: int, body: bytes, headers: Optional[dict] = None,
              content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _authorized(self) -> bool:
        key = self.router.api_key
        if not key or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._send(401, _error_body(401, "missing or wrong API key: send 'Authorization: "
                                         "Bearer <key>'", "invalid_api_key",
                                    "invalid_request_error"))
        return False

    def _upstream_headers(self) -> dict:
        h = {"Content-Type": "application/json"}
        if self.router.upstream_api_key:
            h["Authorization"] = f"Bearer {self.router.upstream_api_key}"
        return h

    def _read_body(self) -> Optional[bytes]:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self._send(411, _error_body(411, "send the body with a Content-Length",
                                        "length_required", "invalid_request_error"))
            self.close_connection = True
            return None
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    # --- GET
    def do_GET(self):
        r = self.router
        path = urllib.parse.urlsplit(self.path).path
        if path == "/health":
            st = r.status()
            up = [b["name"] for b in st["replicas"] if b["state"] == "up"]
            body = {"status": "ok" if up else "unavailable", "replicas": st["replicas"]}
            return self._send(200 if up else 503, json.dumps(body).encode())
        if not self._authorized():
            return
        if path == "/router/replicas":
            return self._send(200, json.dumps(r.status()).encode())
        if path == "/metrics":
            return self._send(200, self._metrics().encode(),
                              content_type="text/plain; version=0.0.4")
        self._forward_plain("GET", b"")

    def _metrics(self) -> str:
        st = self.router.status()
        lines = [f"detllm_router_{k}_total {st[k]}"
                 for k in ("requests", "failovers", "failed", "resumed_streams")]
        for b in st["replicas"]:
            lab = f'{{replica="{b["name"]}",state="{b["state"]}"}}'
            lines.append(f"detllm_router_replica_in_flight{lab} {b['in_flight']}")
            lines.append(f"detllm_router_replica_served_total{lab} {b['served']}")
        return "\n".join(lines) + "\n"

    # --- POST
    def do_POST(self):
        if not self._authorized():
            return
        body = self._read_body()
        if body is None:
            return
        path = urllib.parse.urlsplit(self.path).path
        r = self.router
        parts = path.strip("/").split("/")
        if len(parts) == 4 and parts[:2] == ["router", "replicas"] and parts[3] in ("drain", "undrain"):
            if parts[2] not in r.backends:
                return self._send(404, _error_body(404, f"no replica named {parts[2]!r}",
                                                   "replica_not_found"))
            if parts[3] == "drain":
                migrate = (json.loads(body or b"{}") or {}).get("migrate", True)
                r.drain(parts[2], migrate=migrate)
            else:
                r.undrain(parts[2])
            return self._send(200, json.dumps(r.status()).encode())
        if path in GENERATION_PATHS:
            return self._generate(path, body)
        self._forward_plain("POST", body)

    def _forward_plain(self, method: str, body: bytes) -> None:
        """Any other endpoint (tokenize, models, ...): one replica, retried elsewhere if down."""
        tried = set()
        while True:
            try:
                b = self.router._choose(None, None, tried)
            except ReplicaFailed as e:
                return self._send(503, _error_body(503, str(e), "no_replica",
                                                   "service_unavailable"))
            try:
                c = http.client.HTTPConnection(b.host, b.port, timeout=60)
                c.request(method, self.path, body=body or None, headers=self._upstream_headers())
                resp = c.getresponse()
                data = resp.read()
                c.close()
            except OSError:
                self.router._release(b, None)
                self.router._failed(b)
                tried.add(b.name)
                continue
            self.router._release(b, None)
            return self._send(resp.status, data, {"X-Detllm-Replica": b.name},
                              resp.getheader("Content-Type") or "application/json")

    # --- generation
    def _generate(self, path: str, raw: bytes) -> None:
        r = self.router
        with r.lock:
            r.counters["requests"] += 1
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError
        except ValueError:
            return self._forward_plain("POST", raw)  # the replica answers the 400
        chat = path.endswith("/chat/completions")
        deterministic = bool(body.get("deterministic", True if body.get("determinism_mode")
                                      else (r.reference[1].deterministic_by_default
                                            if r.reference else True)))
        strip = False
        if deterministic:
            if body.get("seed") is None:
                body["seed"] = random.randrange(SEED_LIMIT)  # so a re-run draws the same
            if body.get("stream"):
                if chat and not body.get("logprobs"):
                    body["logprobs"], strip = True, True
                elif not chat and body.get("logprobs") is None:
                    body["logprobs"], strip = 0, True
        key = r._prefix_key(path, body)
        payload = json.dumps(body).encode()
        if body.get("stream"):
            return self._generate_stream(path, payload, key, deterministic,
                                         StreamState(chat, strip))
        self._generate_whole(path, payload, key, deterministic)

    def _open(self, b: Backend, path: str, payload: bytes, deterministic: bool):
        conn = http.client.HTTPConnection(b.host, b.port, timeout=self.router.request_timeout)
        with self.router.lock:
            b.conns[id(conn)] = (conn, deterministic)
        try:
            conn.request("POST", path, body=payload, headers=self._upstream_headers())
            resp = conn.getresponse()
        except OSError as e:
            raise ReplicaFailed(f"replica {b.name} did not answer: {e}") from None
        if resp.status == 503:  # draining, or its self-check failed: another may serve
            resp.read()
            raise ReplicaFailed(f"replica {b.name} answered 503")
        return conn, resp

    def _generate_whole(self, path: str, payload: bytes, key, deterministic: bool) -> None:
        r = self.router
        tried, fingerprint, last = set(), None, ""
        while True:
            try:
                b = r._choose(key, fingerprint, tried)
            except ReplicaFailed as e:
                return self._fail_whole(f"{last}; {e}" if last else str(e))
            conn = None
            try:
                conn, resp = self._open(b, path, payload, deterministic)
                data = resp.read()
                if resp.status == 200:
                    out = json.loads(data)
            except (ReplicaFailed, OSError, http.client.HTTPException, ValueError) as e:
                last = f"replica {b.name} failed ({e.__class__.__name__}: {e})"
                if conn is not None:
                    conn.close()
                r._release(b, id(conn) if conn else None)
                r._failed(b)
                tried.add(b.name)
                if deterministic:
                    fingerprint = b.identity.fingerprint
                    continue
                if r.nondeterministic == "retry":
                    continue
                return self._fail_whole(last + ": this non-deterministic request is not "
                                        "retried (router option nondeterministic=fail)")
            conn.close()
            r._release(b, id(conn))
            headers = {"X-Detllm-Replica": b.name}
            for h in ("X-Detllm-Seed", "X-Detllm-Fingerprint", "X-Request-Id"):
                if resp.getheader(h):
                    headers[h] = resp.getheader(h)
            if resp.status != 200:
                return self._send(resp.status, data, headers)
            out["replica"] = b.name
            out["weight_version"] = b.weight_version
            return self._send(200, json.dumps(out).encode(), headers)

    def _fail_whole(self, message: str) -> None:
        with self.router.lock:
            self.router.counters["failed"] += 1
        self._send(502, _error_body(502, message, "replica_failed"))

    def _generate_stream(self, path: str, payload: bytes, key, deterministic: bool,
                         state: StreamState) -> None:
        r = self.router
        tried, fingerprint, started, last = set(), None, False, ""
        while True:
            try:
                b = r._choose(key, fingerprint, tried)
            except ReplicaFailed as e:
                return self._fail_stream(started, f"{last}; {e}" if last else str(e))
            conn = None
            try:
                conn, resp = self._open(b, path, payload, deterministic)
                if resp.status != 200:
                    data = resp.read()
                    r._release(b, id(conn))
                    conn.close()
                    if started:  # cannot happen for a request the first replica took
                        return self._fail_stream(True, f"replica {b.name}: {data[:500]!r}")
                    return self._send(resp.status, data, {"X-Detllm-Replica": b.name})
                if not started:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("X-Detllm-Replica", b.name)
                    for h in ("X-Detllm-Seed", "X-Detllm-Fingerprint", "X-Request-Id"):
                        if resp.getheader(h):
                            self.send_header(h, resp.getheader(h))
                    self.end_headers()
                    started = True
                if self._pump(resp, b, state, deterministic):
                    r._release(b, id(conn))
                    conn.close()
                    self._chunk(b"")
                    return
                raise ReplicaFailed(f"replica {b.name}'s stream ended before [DONE]")
            except (BrokenPipeError, ConnectionResetError):
                # Writing to the client failed (upstream errors are _UpstreamError or
                # ReplicaFailed): it went away, so the upstream request is closed and the
                # replica aborts it (its KV freed).
                if conn is not None:
                    conn.close()
                r._release(b, id(conn) if conn else None)
                self.close_connection = True
                return
            except (ReplicaFailed, OSError, http.client.HTTPException, _UpstreamError) as e:
                last = f"replica {b.name} failed ({e})"
            except ReplayMismatch as e:
                if conn is not None:
                    conn.close()
                r._release(b, id(conn) if conn else None)
                return self._fail_stream(started, f"replica {b.name}'s re-run of this "
                                         f"deterministic request differs from what was sent "
                                         f"({e}); the stream is stopped rather than spliced")
            if conn is not None:
                conn.close()
            r._release(b, id(conn) if conn else None)
            if b.state == "up":
                r._failed(b)
            else:
                with r.lock:
                    r.counters["failovers"] += 1
            tried.add(b.name)
            if deterministic:
                fingerprint = b.identity.fingerprint
                if state.chunks_sent:
                    with r.lock:
                        r.counters["resumed_streams"] += 1
                state.restart()
                continue
            if r.nondeterministic == "retry" and state.chunks_sent == 0:
                continue
            return self._fail_stream(started, last + ": a non-deterministic stream cannot be "
                                     "resumed (another replica would draw other tokens)" +
                                     ("" if r.nondeterministic == "fail" else
                                      " and part of it was already sent"))

    def _pump(self, resp, b: Backend, state: StreamState, deterministic: bool) -> bool:
        """Forwards one replica's SSE events; True at [DONE]. Raises _UpstreamError on a cut."""
        event = []
        while True:
            try:
                line = resp.readline()
            except (OSError, http.client.HTTPException) as e:
                raise _UpstreamError(str(e)) from None
            if not line:
                return False
            line = line.rstrip(b"\r\n")
            if line:
                event.append(line)
                continue
            if not event:
                continue
            data = b"\n".join(l[5:].lstrip() if l.startswith(b"data:") else l for l in event)
            event = []
            if data == b"[DONE]":
                if deterministic and state.choices and not state.all_finished():
                    return False  # aborted choices: resume them elsewhere
                self._chunk(b"data: [DONE]\n\n")
                return True
            obj = json.loads(data)
            if "error" in obj:
                self._chunk(b"data: " + data + b"\n\n")
                state.chunks_sent += 1
                continue
            if deterministic and any(c.get("finish_reason") == "abort"
                                     for c in obj.get("choices") or []):
                # The replica is shutting down and aborted it: resume elsewhere, do not end.
                obj["choices"] = [c for c in obj["choices"] if c.get("finish_reason") != "abort"]
                if obj["choices"]:
                    self._emit(obj, b, state)
                raise _UpstreamError(f"replica {b.name} aborted the request (draining)")
            self._emit(obj, b, state)

    def _emit(self, obj: dict, b: Backend, state: StreamState) -> None:
        out = state.accept(obj)
        if out is None:
            return
        out["replica"] = b.name
        out["weight_version"] = b.weight_version
        self._chunk(b"data: " + json.dumps(out).encode() + b"\n\n")
        state.chunks_sent += 1

    def _fail_stream(self, started: bool, message: str) -> None:
        with self.router.lock:
            self.router.counters["failed"] += 1
        if not started:
            return self._send(502, _error_body(502, message, "replica_failed"))
        err = {"error": {"message": message, "type": "replica_error", "param": None,
                         "code": "replica_failed"}}
        self._chunk(b"data: " + json.dumps(err).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")


class _UpstreamError(Exception):
    """The replica's side of a stream broke (not the client's)."""


def main(argv=None) -> int:
    from .cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
