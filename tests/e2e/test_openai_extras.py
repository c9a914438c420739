"""What users expect of an OpenAI(-compatible) server beyond the basics, against the real
binary (docs/server.md): `stop_reason` as vLLM returns it, chat `echo`, GET /v1/models/{id},
opt-in CORS, the latency histograms in /metrics (queue, time to first token, time per
output token, end to end), and return_routed_experts refused by a dense model."""
import json

import pytest

from conftest import start_server, wait_until


def test_stop_reason_is_the_stop_string_or_token_or_null(server):
    free = server.post("/v1/completions", {"prompt": "The capital of France is",
                                            "max_tokens": 12, "temperature": 0,
                                            "logprobs": 0}).json()
    choice = free["choices"][0]
    if choice["finish_reason"] == "length":
        assert choice["stop_reason"] is None
    text = choice["text"]
    assert len(text) >= 4, text
    stop = text[2:4]
    by_string = server.post("/v1/completions", {"prompt": "The capital of France is",
                                                 "max_tokens": 12, "temperature": 0,
                                                 "stop": [stop]}).json()["choices"][0]
    assert by_string["finish_reason"] == "stop"
    assert by_string["stop_reason"] == stop
    third = choice["logprobs"]["token_ids"][2]
    by_token = server.post("/v1/completions", {"prompt": "The capital of France is",
                                                "max_tokens": 12, "temperature": 0,
                                                "stop_token_ids": [third]}).json()["choices"][0]
    assert by_token["finish_reason"] == "stop"
    assert by_token["stop_reason"] == third
    # Streamed: the last chunk of the choice carries it.
    r = server.post("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 12,
                                         "temperature": 0, "stop": [stop], "stream": True},
                    stream=True)
    chunks = [json.loads(line[6:]) for line in r.iter_lines()
              if line.startswith(b"data: {")]
    last = [c["choices"][0] for c in chunks if c["choices"]][-1]
    assert last["finish_reason"] == "stop" and last["stop_reason"] == stop


def test_chat_echo_continues_the_assistant_message(server):
    messages = [{"role": "user", "content": "Name a colour."},
                {"role": "assistant", "content": "My favourite colour is"}]
    base = {"messages": messages, "max_tokens": 6, "temperature": 0,
            "add_generation_prompt": False}
    plain = server.post("/v1/chat/completions", base).json()
    echoed = server.post("/v1/chat/completions", {**base, "echo": True}).json()
    assert echoed["choices"][0]["message"]["content"] == \
        "My favourite colour is" + plain["choices"][0]["message"]["content"]
    r = server.post("/v1/chat/completions", {**base, "echo": True, "stream": True}, stream=True)
    text = ""
    for line in r.iter_lines():
        if line.startswith(b"data: {"):
            for c in json.loads(line[6:])["choices"]:
                text += c["delta"].get("content") or ""
    assert text == echoed["choices"][0]["message"]["content"]
    # The last message is the user's: nothing to echo.
    user_last = server.post("/v1/chat/completions",
                            {"messages": messages[:1], "max_tokens": 4, "temperature": 0,
                             "echo": True}).json()
    again = server.post("/v1/chat/completions",
                        {"messages": messages[:1], "max_tokens": 4, "temperature": 0}).json()
    assert user_last["choices"][0]["message"]["content"] == \
        again["choices"][0]["message"]["content"]


def test_routed_experts_are_refused_by_a_dense_model(client):
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="default", prompt="Hi", max_tokens=2,
                                  extra_body={"return_routed_experts": True})
    assert e.value.param == "return_routed_experts", str(e.value)
    assert "not a mixture-of-experts model" in str(e.value)


def test_model_by_id(server):
    listed = server.get("/v1/models").json()["data"]
    for m in listed:
        one = server.get("/v1/models/" + m["id"])
        assert one.status_code == 200 and one.json() == m
    missing = server.get("/v1/models/gpt-4")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"


def test_cors_is_off_by_default(server):
    r = server.get("/v1/models", headers={"Origin": "https://app.example"})
    assert "Access-Control-Allow-Origin" not in r.headers
    import requests
    pre = requests.options(server.base + "/v1/completions",
                           headers={"Origin": "https://app.example",
                                    "Access-Control-Request-Method": "POST"}, timeout=10)
    assert pre.status_code == 405


def test_cors_when_enabled():
    import requests
    s = start_server("--cors-origin", "https://app.example")
    try:
        pre = requests.options(s.base + "/v1/chat/completions",
                               headers={"Origin": "https://app.example",
                                        "Access-Control-Request-Method": "POST",
                                        "Access-Control-Request-Headers": "authorization"},
                               timeout=10)
        assert pre.status_code == 204
        assert pre.headers["Access-Control-Allow-Origin"] == "https://app.example"
        assert "POST" in pre.headers["Access-Control-Allow-Methods"]
        assert "Authorization" in pre.headers["Access-Control-Allow-Headers"]
        r = s.post("/v1/completions", {"prompt": "x", "max_tokens": 1},
                   headers={"Origin": "https://app.example"})
        assert r.status_code == 200
        assert r.headers["Access-Control-Allow-Origin"] == "https://app.example"
        other = s.get("/v1/models", headers={"Origin": "https://evil.example"})
        assert "Access-Control-Allow-Origin" not in other.headers
    finally:
        assert s.stop() == 0


def test_latency_histograms(server):
    def count(name):
        return server.metrics().get(f"{name}_count", 0.0)
    names = ["detllm_time_to_first_token_seconds", "detllm_time_per_output_token_seconds",
             "detllm_e2e_request_latency_seconds", "detllm_request_queue_time_seconds"]
    before = {n: count(n) for n in names}
    r = server.post("/v1/completions", {"prompt": "Hello", "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200
    assert wait_until(lambda: all(count(n) == before[n] + 1 for n in names), timeout=10), \
        {n: (before[n], count(n)) for n in names}
    m = server.metrics()
    for n in names:
        assert m[f'{n}_bucket{{le="+Inf"}}'] == m[f"{n}_count"]
        assert m[f"{n}_sum"] >= 0
