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
