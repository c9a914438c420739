"""A client that goes away aborts its request: the engine stops the sequence and frees its KV
(running sequences back to 0, KV blocks used back to the baseline), for streamed and
non-streamed responses."""
import json
import socket

from conftest import API_KEY, wait_until


def open_request(server, body):
    data = json.dumps(body).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    s.sendall(head + data)
    return s


def requests_total(m, status):
    return m.get(f'detllm_requests_total{{endpoint="/v1/completions",status="{status}"}}', 0.0)


def idle(server, baseline_used):
    m = server.metrics()
    return (m["detllm_running_sequences"] == 0 and m["detllm_kv_blocks_used"] == baseline_used
            and m["detllm_engine_requests"] == 0)


def test_disconnect_mid_stream_aborts(server):
    assert wait_until(lambda: server.metrics()["detllm_running_sequences"] == 0)
    base = server.metrics()
    s = open_request(server, {"model": "default", "prompt": "Write a very long story.",
                              "max_tokens": 3000, "ignore_eos": True, "stream": True})
    got = b""
    while got.count(b"data: ") < 3:
        chunk = s.recv(4096)
        assert chunk, "the stream ended early"
        got += chunk
    assert b" 200 " in got.split(b"\r\n", 1)[0]
    running = server.metrics()
    assert running["detllm_running_sequences"] == 1
    assert running["detllm_kv_blocks_used"] > base["detllm_kv_blocks_used"]
    s.close()
    assert wait_until(lambda: idle(server, base["detllm_kv_blocks_used"]), timeout=20)
    m = server.metrics()
    assert m["detllm_aborted_requests_total"] >= base["detllm_aborted_requests_total"] + 1
    assert m["detllm_client_disconnects_total"] >= base["detllm_client_disconnects_total"] + 1
    # The dropped stream is a request too: counted once, with the status it was answered with.
    assert wait_until(lambda: requests_total(server.metrics(), 200) ==
                      requests_total(base, 200) + 1, timeout=10)


def test_disconnect_while_waiting_for_a_whole_response(server):
    assert wait_until(lambda: server.metrics()["detllm_running_sequences"] == 0)
    base = server.metrics()
    s = open_request(server, {"model": "default", "prompt": "Another long story.",
                              "max_tokens": 3000, "ignore_eos": True})
    assert wait_until(lambda: server.metrics()["detllm_running_sequences"] == 1, timeout=20)
    # Generating (not only admitted) before the client goes away.
    assert wait_until(lambda: server.metrics()["detllm_generation_tokens_total"] >=
                      base["detllm_generation_tokens_total"] + 3, timeout=20)
    s.close()
    assert wait_until(lambda: idle(server, base["detllm_kv_blocks_used"]), timeout=20)
    assert server.metrics()["detllm_aborted_requests_total"] >= \
        base["detllm_aborted_requests_total"] + 1
    # Counted once: a whole body is also sent chunked, its 200 head as soon as the engine took
    # the request, so it counts under 200 (499 is for a request closed before any reply).
    assert wait_until(lambda: requests_total(server.metrics(), 200) ==
                      requests_total(base, 200) + 1, timeout=10)
    assert requests_total(server.metrics(), 499) == requests_total(base, 499)


def test_every_request_read_is_counted_once(server):
    """A stream the client drops counts under 200; a request pipelined behind it, read but
    never answered, counts once as 499."""
    assert wait_until(lambda: server.metrics()["detllm_running_sequences"] == 0)
    base = server.metrics()
    first = json.dumps({"model": "default", "prompt": "A long story, please.", "max_tokens": 3000,
                        "ignore_eos": True, "stream": True}).encode()
    second = json.dumps({"model": "default", "prompt": "Hi", "max_tokens": 1}).encode()

    def post(data):
        return (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode() + data

    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    s.sendall(post(first) + post(second))
    got = b""
    while got.count(b"data: ") < 2:
        chunk = s.recv(4096)
        assert chunk, "the stream ended early"
        got += chunk
    s.close()
    assert wait_until(lambda: idle(server, base["detllm_kv_blocks_used"]), timeout=20)
    assert wait_until(lambda: requests_total(server.metrics(), 200) ==
                      requests_total(base, 200) + 1, timeout=10)
    assert wait_until(lambda: requests_total(server.metrics(), 499) ==
                      requests_total(base, 499) + 1, timeout=10)
