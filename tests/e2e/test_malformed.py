"""Malformed input: truncated bodies, huge numbers, wrong types, invalid UTF-8, empty prompts,
unknown fields, oversized bodies, garbage on the socket. Every answer is a 4xx with an
OpenAI-style error body (or a closed connection for an unparseable request), and afterwards
the server still answers a normal request exactly as before."""
import json
import socket

import pytest

from conftest import API_KEY

GOOD = {"model": "default", "prompt": "The quick brown fox", "max_tokens": 4,
        "temperature": 0, "logprobs": 0}


def raw_request(server, body: bytes, path="/v1/completions", content_length=None,
                extra_headers=b"", close_early=False, timeout=15):
    """Sends bytes as they are; returns (status or None, response body bytes)."""
    length = len(body) if content_length is None else content_length
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n"
            f"Connection: close\r\n").encode() + extra_headers + b"\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as s:
        s.sendall(head + body)
        if close_early:
            return None, b""
        data = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except (socket.timeout, ConnectionResetError):
            pass
    if not data:
        return None, b""
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""


def good_ids(server):
    r = server.post("/v1/completions", GOOD)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["logprobs"]["token_ids"]


def assert_error(r, status=400, param=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]
    if param is not None:
        assert err["param"] == param, err


BAD_BODIES = [
    # (body, param expected in the error, or None)
    ({"prompt": 123}, "prompt"),
    ({"prompt": {"text": "x"}}, "prompt"),
    ({"prompt": [1, "two"]}, "prompt"),
    ({"prompt": [[1, 2], "x", 3]}, "prompt[2]"),
    ({"prompt": []}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": [-5]}, "prompt"),
    ({"prompt": [2**40]}, "prompt"),
    ({"prompt": "x", "max_tokens": "4"}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 10**30}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 2**63}, "max_tokens"),
    ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 1.5}, "max_tokens"),
    ({"prompt": "x", "temperature": 1e308}, "temperature"),
    ({"prompt": "x", "temperature": None, "top_p": -1}, "top_p"),
    ({"prompt": "x", "seed": 2**64}, "seed"),
    ({"prompt": "x", "seed": -3}, "seed"),
    ({"prompt": "x", "n": 1000}, "n"),
    ({"prompt": "x", "n": True}, "n"),
    ({"prompt": "x", "logprobs": 100}, "logprobs"),
    ({"prompt": "x", "stop": [1, 2]}, "stop[0]"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "x", "unknown_field": 1}, "unknown_field"),
    ({"prompt": "x", "model": ["default"]}, "model"),
]


@pytest.mark.parametrize("body,param", BAD_BODIES)
def test_bad_completion_bodies(server, body, param):
    assert_error(server.post("/v1/completions", body), 400, param)


def test_bad_chat_bodies(server):
    for body in ({"messages": "hi"}, {"messages": []}, {"messages": [{"role": "user"}]},
                 {"messages": [{"role": "robot", "content": "x"}]},
                 {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
                 {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
                 {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}):
        assert_error(server.post("/v1/chat/completions", body), 400)


def test_malformed_bytes(server):
    before = good_ids(server)
    cases = [
        b"",                                   # empty body
        b"{",                                  # truncated
        json.dumps(GOOD).encode()[:-7],        # truncated mid-value
        b'{"prompt": "x",}',                   # trailing comma
        b"null", b"[]", b"42", b'"text"',      # not an object
        b'{"prompt": "caf\xc3"}',              # invalid UTF-8 (truncated sequence)
        b'{"prompt": "\xff\xfe"}',             # invalid UTF-8 bytes
        b'{"prompt": "\\ud800"}',              # lone surrogate escape
        b'{"prompt": "x", "max_tokens": 1e999}',  # number overflow
        b"[" * 100000,                         # deep nesting, unterminated
        b"[" * 50000 + b"]" * 50000,           # deep nesting, balanced
        b'{"prompt": "x"} {"prompt": "y"}',    # two documents
        b"\x00\x01\x02\x03",
    ]
    for body in cases:
        status, payload = raw_request(server, body)
        assert status == 400, (body[:40], status, payload[:200])
        assert "error" in json.loads(payload), payload
    assert good_ids(server) == before


def test_transport_garbage(server):
    before = good_ids(server)
    # Declared length longer than what is sent, then the client goes away.
    raw_request(server, b'{"prompt": "x"', content_length=1000, close_early=True)
    # Declared length longer than sent, client waits: the server times the read out.
    status, _ = raw_request(server, b'{"prompt": "x"', content_length=100, timeout=15)
    assert status in (None, 400)
    # Not HTTP at all.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"\x16\x03\x01\x02\x00 definitely not http\r\n\r\n")
        try:
            s.recv(4096)
        except (socket.timeout, ConnectionResetError):
            pass
    # A huge header line.
    status, _ = raw_request(server, b"{}", extra_headers=b"X-Big: " + b"a" * 20000 + b"\r\n")
    assert status in (None, 400, 413, 431)
    assert good_ids(server) == before


def test_oversized_body(server):
    before = good_ids(server)
    body = json.dumps({"prompt": "a" * (5 << 20)}).encode()
    status, payload = raw_request(server, body)
    assert status == 413
    err = json.loads(payload)["error"]
    assert err["code"] == "request_too_large"
    assert good_ids(server) == before


def test_unknown_model_and_route(server):
    assert_error(server.post("/v1/completions", {"model": "nope", "prompt": "x"}), 404, "model")
    assert_error(server.post("/v1/embeddings", {"input": "x"}), 404)
    assert_error(server.get("/v1/completions"), 405)  # a known route, another method
