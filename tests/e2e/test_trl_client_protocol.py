"""TRL's server mode against `detllm serve`: the exact requests TRL 1.16's VLLMClient
(trl/generation/vllm_client.py) sends to vLLM's OpenAI server, and the fields it reads back
(docs/python.md, "TRL server mode"). No TRL or torch here: scripts/rl_check.sh runs TRL's own
client against the server.

What TRL relies on: prompt-major choices carrying `prompt_token_ids` and `token_ids`
(return_token_ids), logprobs naming tokens "token_id:N" (return_tokens_as_token_ids), prompt
logprobs that score a finished sequence, /server_info's logprobs_mode and
weight_transfer_config, /get_world_size, /reset_prefix_cache."""
import struct

import pytest

PROMPTS = ["The capital of France is", "Count: one, two,"]


def f32(values):
    """The float32 bits of JSON numbers (the server writes each float32 exactly)."""
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in values]


def trl_generate_body(model, prompts, n=2, max_tokens=6, seed=3):
    # VLLMClient.generate's payload with GRPOTrainer's defaults, `seed` through generation_kwargs.
    return {"model": model, "prompt": prompts, "return_token_ids": True,
            "return_tokens_as_token_ids": True, "n": n, "repetition_penalty": 1.0,
            "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
            "max_tokens": max_tokens, "logprobs": 0, "seed": seed}


@pytest.fixture(scope="module")
def model(server):
    r = server.get("/v1/models")
    assert r.status_code == 200, r.text
    return r.json()["data"][0]["id"]  # what VLLMClient.__init__ reads


@pytest.fixture(scope="module")
def generated(server, model):
    """VLLMClient.generate of PROMPTS (n=2): the choices, shared by the tests below."""
    r = server.post("/v1/completions", trl_generate_body(model, PROMPTS))
    assert r.status_code == 200, r.text
    return r.json()["choices"]


def ids_of_logprobs(lp):
    return [int(t.removeprefix("token_id:")) for t in lp["tokens"]]


def test_generate_returns_token_ids_prompt_major(server, model, generated):
    choices = generated
    assert len(choices) == 4
    for k, prompt in enumerate(PROMPTS):
        want = server.post("/tokenize", {"model": model, "prompt": prompt}).json()["tokens"]
        # VLLMClient: prompt_ids = [c["prompt_token_ids"] for c in choices[::n]]
        assert choices[2 * k]["prompt_token_ids"] == want
        assert choices[2 * k + 1]["prompt_token_ids"] == want
    for c in choices:
        assert 0 < len(c["token_ids"]) <= 6
        lp = c["logprobs"]
        # parse_logprobs: each token is "token_id:<id>", one logprob per completion token.
        assert ids_of_logprobs(lp) == c["token_ids"]
        assert len(lp["token_logprobs"]) == len(c["token_ids"])
    assert choices[0]["token_ids"] != choices[1]["token_ids"]  # two draws of one prompt


def test_token_id_prompts_give_the_same_bits(server, model, generated):
    # GRPOTrainer sends token ids: the same prompt as ids gives the same tokens and logprobs.
    text = generated
    ids = [c["prompt_token_ids"] for c in text[::2]]
    again = server.post("/v1/completions", trl_generate_body(model, ids)).json()["choices"]
    for a, b in zip(text, again):
        assert a["prompt_token_ids"] == b["prompt_token_ids"]
        assert a["token_ids"] == b["token_ids"]
        assert f32(a["logprobs"]["token_logprobs"]) == f32(b["logprobs"]["token_logprobs"])


def test_without_return_token_ids_no_ids_fields(server, model):
    body = trl_generate_body(model, PROMPTS[:1], n=1, max_tokens=2)
    del body["return_token_ids"]
    c = server.post("/v1/completions", body).json()["choices"][0]
    assert "token_ids" not in c and "prompt_token_ids" not in c


def test_chat_returns_prompt_token_ids_and_token_ids(server, model):
    # VLLMClient.chat's payload (logprobs=0 -> top_logprobs 0).
    body = {"model": model, "n": 2, "repetition_penalty": 1.0, "temperature": 1.0, "top_p": 1.0,
            "top_k": 0, "min_p": 0.0, "max_tokens": 4, "logprobs": True, "top_logprobs": 0,
            "return_token_ids": True, "return_tokens_as_token_ids": True, "seed": 1,
            "messages": [{"role": "user", "content": "Name a colour."}]}
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    j = r.json()
    assert isinstance(j["prompt_token_ids"], list) and len(j["prompt_token_ids"]) > 5
    for c in j["choices"]:
        content = c["logprobs"]["content"]
        assert [int(e["token"].removeprefix("token_id:")) for e in content] == c["token_ids"]


def test_sequence_logprobs_score_the_generated_tokens_bit_for_bit(server, model, generated):
    # VLLMClient.get_sequence_logprobs: the finished sequence as the prompt, max_tokens 1,
    # prompt_logprobs; each completion position's actual-token logprob (keyed by its id) is the
    # logprob the generation reported for that token, bit for bit.
    c = generated[0]
    prompt, completion = c["prompt_token_ids"], c["token_ids"]
    seq = prompt + completion
    r = server.post("/v1/completions", {"model": model, "prompt": [seq], "max_tokens": 1,
                                        "temperature": 1.0, "prompt_logprobs": 5})
    assert r.status_code == 200, r.text
    plp = r.json()["choices"][0]["prompt_logprobs"]
    assert len(plp) == len(seq) and plp[0] is None
    actual = [plp[p][str(seq[p])]["logprob"] for p in range(len(prompt), len(seq))]
    assert f32(actual) == f32(c["logprobs"]["token_logprobs"])
    ranks = sorted(e["rank"] for e in plp[len(prompt)].values())
    assert ranks[:5] == [1, 2, 3, 4, 5]


def test_stream_with_return_token_ids_is_refused(server, model):
    body = trl_generate_body(model, PROMPTS[:1], n=1)
    body["stream"] = True
    r = server.post("/v1/completions", body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "return_token_ids"


def test_server_info_and_world_size(server):
    r = server.get("/server_info", params={"config_format": "json"})
    assert r.status_code == 200, r.text
    cfg = r.json()["vllm_config"]
    # GRPOTrainer warns unless processed_logprobs; detllm reports the model's raw logprobs.
    assert cfg["model_config"]["logprobs_mode"] == "raw_logprobs"
    # No --weight-transfer: None, which VLLMClient.init_communicator refuses by name.
    assert cfg["weight_transfer_config"] is None
    assert isinstance(server.get("/server_info").json()["vllm_config"], str)  # vLLM's default
    assert server.get("/server_info", params={"config_format": "yaml"}).status_code == 400
    assert server.get("/get_world_size").json() == {"world_size": 1}


def test_reset_prefix_cache_empties_the_cache_and_changes_no_bit(server, model):
    body = {"model": model, "prompt": "word " * 80, "max_tokens": 4, "seed": 5, "logprobs": 0}

    def hits():
        return server.metrics()["detllm_prefix_cache_hit_tokens_total"]

    first = server.post("/v1/completions", body).json()["choices"][0]
    before = hits()
    cached = server.post("/v1/completions", body).json()["choices"][0]
    assert hits() > before  # control: without a reset the repeat hits the cache
    r = server.post("/reset_prefix_cache")
    assert r.status_code == 200, r.text
    assert r.json()["success"] is True and r.json()["dropped_blocks"] > 0
    assert server.metrics()["detllm_kv_blocks_cached"] == 0
    before = hits()
    recomputed = server.post("/v1/completions", body).json()["choices"][0]
    assert hits() == before  # nothing left to hit
    for c in (cached, recomputed):
        assert c["logprobs"]["token_ids"] == first["logprobs"]["token_ids"]
        assert f32(c["logprobs"]["token_logprobs"]) == f32(first["logprobs"]["token_logprobs"])
    assert server.post("/reset_prefix_cache", {"x": 1}).status_code == 400
