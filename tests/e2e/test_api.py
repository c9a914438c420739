"""The OpenAI API of `detllm serve` through the official `openai` client and curl:
completions, chat, streaming, logprobs, echo, n > 1, seeds, reproducibility fields, auth,
errors, models, tokenize/detokenize, metrics."""
import json
import subprocess

import pytest

from conftest import API_KEY, wait_until


def completion_ids(choice):
    return choice.logprobs.model_extra["token_ids"] if choice.logprobs else None


def test_models_and_health(server, client):
    ids = [m.id for m in client.models.list().data]
    assert ids[-1] == "default" and len(ids) == 2
    r = server.get("/health", headers={"Authorization": ""})
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_completion_fields_and_headers(server, client):
    raw = client.completions.with_raw_response.create(
        model="default", prompt="The capital of France is", max_tokens=5, temperature=0,
        logprobs=2)
    c = raw.parse()
    assert raw.headers["x-detllm-version"]
    assert raw.headers["x-detllm-backend"].startswith("cpu")
    assert "det=" in raw.headers["x-detllm-determinism"]
    assert raw.headers["x-detllm-fingerprint"] == c.system_fingerprint
    assert c.system_fingerprint.startswith("fp_")
    assert int(raw.headers["x-detllm-seed"]) == c.model_extra["seed"]
    assert c.object == "text_completion"
    assert c.usage.completion_tokens == len(completion_ids(c.choices[0])) <= 5
    assert c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs)
    assert all(len(t) == 2 for t in lp.top_logprobs)
    assert c.choices[0].finish_reason in ("length", "stop")


def test_greedy_is_reproducible_and_seed_replays(client):
    kw = dict(model="default", prompt="Once upon a time", max_tokens=6, logprobs=0)
    a = client.completions.create(temperature=0, **kw)
    b = client.completions.create(temperature=0, **kw)
    assert completion_ids(a.choices[0]) == completion_ids(b.choices[0])
    # No seed: the server draws one and returns it; sending it back replays the sample.
    s1 = client.completions.create(temperature=1.0, **kw)
    seed = s1.model_extra["seed"]
    assert 0 <= seed < 2**53
    s2 = client.completions.create(temperature=1.0, seed=seed, **kw)
    assert completion_ids(s1.choices[0]) == completion_ids(s2.choices[0])
    assert s1.choices[0].logprobs.token_logprobs == s2.choices[0].logprobs.token_logprobs
    assert s1.choices[0].text == s2.choices[0].text


def test_n_and_prompt_list(client):
    c = client.completions.create(model="default", prompt=["Hello", "Goodbye"], n=2,
                                  max_tokens=3, temperature=1.0, seed=7, logprobs=0,
                                  extra_body={"ignore_eos": True})
    assert [ch.index for ch in c.choices] == [0, 1, 2, 3]
    assert all(len(completion_ids(ch)) == 3 for ch in c.choices)
    assert c.usage.completion_tokens == 12
    # Samples of one prompt draw from different streams.
    assert completion_ids(c.choices[0]) != completion_ids(c.choices[1]) or \
        completion_ids(c.choices[2]) != completion_ids(c.choices[3])


def test_token_id_prompt_equals_text_prompt(server, client):
    ids = server.post("/tokenize", {"prompt": "Tell me a story"}).json()["tokens"]
    a = client.completions.create(model="default", prompt="Tell me a story", max_tokens=4,
                                  temperature=0, logprobs=0)
    b = client.completions.create(model="default", prompt=ids, max_tokens=4, temperature=0,
                                  logprobs=0)
    assert completion_ids(a.choices[0]) == completion_ids(b.choices[0])
    assert server.post("/detokenize", {"tokens": ids}).json()["prompt"] == "Tell me a story"


def test_echo_scores_the_prompt_and_matches_generation(server, client):
    scored = client.completions.create(model="default", prompt="The sky is", max_tokens=0,
                                       echo=True, logprobs=1)
    lp = scored.choices[0].logprobs
    assert scored.choices[0].text == "The sky is"
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(isinstance(x, float) for x in lp.token_logprobs[1:])
    # Teacher forcing: scoring prompt + generated tokens gives the generated tokens' logprobs
    # bit for bit (the same path as generation, design.md V4).
    gen = client.completions.create(model="default", prompt="The sky is", max_tokens=4,
                                    temperature=0, logprobs=0, extra_body={"ignore_eos": True})
    prompt_ids = server.post("/tokenize", {"prompt": "The sky is"}).json()["tokens"]
    assert lp.model_extra["token_ids"] == prompt_ids
    rescored = client.completions.create(model="default", prompt=prompt_ids + completion_ids(
        gen.choices[0]), max_tokens=0, echo=True, logprobs=0)
    assert rescored.choices[0].logprobs.token_logprobs[len(prompt_ids):] == \
        gen.choices[0].logprobs.token_logprobs


def test_streaming_completion_matches_whole(client):
    kw = dict(model="default", prompt="List three colors:", max_tokens=8, temperature=0.7,
              seed=42, logprobs=0)
    whole = client.completions.create(**kw)
    chunks = list(client.completions.create(stream=True,
                                            stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    ids = [i for c in chunks if c.choices and c.choices[0].logprobs
           for i in c.choices[0].logprobs.model_extra["token_ids"]]
    assert text == whole.choices[0].text
    assert ids == completion_ids(whole.choices[0])
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].choices == []
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and
                c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert all(c.system_fingerprint == whole.system_fingerprint for c in chunks)


def test_chat(client):
    c = client.chat.completions.create(
        model="default",
        messages=[{"role": "system", "content": "You answer briefly."},
                  {"role": "user", "content": "What is 2+2?"}],
        max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
    ch = c.choices[0]
    assert c.object == "chat.completion"
    assert ch.message.role == "assistant"
    assert isinstance(ch.message.content, str)
    assert len(ch.logprobs.content) == c.usage.completion_tokens
    assert all(len(t.top_logprobs) == 2 for t in ch.logprobs.content)
    assert "<|im_end|>" not in ch.message.content
    stream = list(client.chat.completions.create(
        model="default",
        messages=[{"role": "system", "content": "You answer briefly."},
                  {"role": "user", "content": "What is 2+2?"}],
        max_completion_tokens=8, temperature=0, stream=True))
    assert stream[0].choices[0].delta.role == "assistant"
    text = "".join(s.choices[0].delta.content or "" for s in stream if s.choices)
    assert text == ch.message.content
    assert stream[-1].choices[0].finish_reason == ch.finish_reason


def test_stop_strings(client):
    base = client.completions.create(model="default", prompt="1, 2, 3, 4,", max_tokens=12,
                                     temperature=0)
    text = base.choices[0].text
    if len(text) < 4:
        pytest.skip("the model stopped too early to test stop strings")
    stop = text[2:4]
    c = client.completions.create(model="default", prompt="1, 2, 3, 4,", max_tokens=12,
                                  temperature=0, stop=[stop])
    assert c.choices[0].finish_reason == "stop"
    assert c.choices[0].text == text[:text.find(stop)]


def test_errors_have_openai_shape(server, client):
    import openai
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-4", prompt="x", max_tokens=1)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="default", prompt="x", max_tokens=1, temperature=5)
    assert e.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="default", prompt="x", max_tokens=1,
                                  extra_body={"bogus_field": 1})
    assert "bogus_field" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:  # the server runs --mode invariant
        client.completions.create(model="default", prompt="x", max_tokens=1,
                                  extra_body={"determinism_mode": "padded"})
    assert e.value.param == "determinism_mode" and "--mode padded" in str(e.value)
    ok = client.completions.create(model="default", prompt="x", max_tokens=1,
                                   extra_body={"determinism_mode": "invariant"})
    assert ok.choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="default", prompt="hello " * 9000, max_tokens=1)
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="default", prompt=[999999], max_tokens=1)
    bad = openai.OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    r = server.get("/v1/models", headers={"Authorization": ""})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = server.get("/no/such/route")
    assert r.status_code == 404 and "error" in r.json()


def test_curl(server):
    body = json.dumps({"model": "default", "prompt": "Hi", "max_tokens": 3, "temperature": 0})
    out = subprocess.run(
        ["curl", "-sS", "-H", f"Authorization: Bearer {API_KEY}", "-H",
         "Content-Type: application/json", "-d", body, server.base + "/v1/completions"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    j = json.loads(out)
    assert j["choices"][0]["text"] is not None and j["system_fingerprint"].startswith("fp_")
    body = json.dumps({"model": "default", "prompt": "Hi", "max_tokens": 3, "temperature": 0,
                       "stream": True})
    out = subprocess.run(
        ["curl", "-sSN", "-H", f"Authorization: Bearer {API_KEY}", "-H",
         "Content-Type: application/json", "-d", body, server.base + "/v1/completions"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    events = [e for e in out.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    streamed = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1])
    assert streamed == j["choices"][0]["text"]


def test_metrics(server, client):
    client.completions.create(model="default", prompt="Count:", max_tokens=2, temperature=0)
    # A request is counted once its response has been written, which the client may see
    # first: wait for it (the engine gauges, by contrast, are current when the response ends).
    key = 'detllm_requests_total{endpoint="/v1/completions",status="200"}'
    assert wait_until(lambda: server.metrics().get(key, 0) >= 1, timeout=10)
    m = server.metrics()
    for name in ("detllm_prompt_tokens_total", "detllm_generation_tokens_total",
                 "detllm_queue_length", "detllm_running_sequences", "detllm_kv_blocks_used",
                 "detllm_kv_blocks_total", "detllm_prefix_cache_hit_rate",
                 'detllm_step_duration_seconds_bucket{le="+Inf"}',
                 "detllm_step_duration_seconds_count"):
        assert name in m, name
    assert any(k.startswith("detllm_self_check_status") for k in m)
    assert m["detllm_generation_tokens_total"] >= 2
