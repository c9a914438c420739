"""The TRL and verl adapters (detllm/integrations/) against the frameworks' protocols, without
torch, TRL or verl (scripts/rl_check.sh runs them against the frameworks themselves).

- TRL rollout_func: the dict GRPOTrainer checks (one completion per prompt entry), the
  rollout's logprobs = llm.score of the same tokens bit for bit (importance ratio exactly 1
  with the engine's forward as the trainer's), the trainer's weights synchronised when its
  step changes; negative control: without the sync the rollout runs the old weights and its
  logprobs are not the new weights' scores.
- TRL server: TRL VLLMClient's exact JSON bodies over real HTTP (/health/, /get_world_size/,
  /generate/ with text and token-id prompts, /chat/, /get_sequence_logprobs/ json and binary,
  /reset_prefix_cache/, the 501 of the NCCL endpoints, refusals by name).
- verl rollout: generate's TokenOutput, seeds from request ids (same id: same bits; batch
  of concurrent calls = each alone), update_weights/release/resume.
"""

import asyncio
import base64
import json
import types
import urllib.error
import urllib.request

import numpy as np
import pytest

import detllm
from detllm.integrations import trl as dtrl
from detllm.integrations import trl_server
from detllm.integrations import verl as dverl

from conftest import bits


def fake_trainer(llm, step=0, params=None, **args):
    """What rollout_func reads of TRL's GRPOTrainer: args, state.global_step, the model (its
    named_parameters), the accelerator's process index."""
    a = dict(max_completion_length=8, temperature=1.0, top_p=1.0, top_k=None, min_p=None,
             repetition_penalty=1.0, generation_kwargs=None, chat_template_kwargs=None)
    a.update(args)
    params = params if params is not None else {}
    model = types.SimpleNamespace(named_parameters=lambda: [(n, _Detachable(v)) for n, v in params.items()])
    return types.SimpleNamespace(args=types.SimpleNamespace(**a),
                                 state=types.SimpleNamespace(global_step=step), model=model,
                                 accelerator=types.SimpleNamespace(process_index=0))


class _Detachable:
    def __init__(self, a):
        self.a = a

    def detach(self):
        return self.a


def scored_completion_bits(llm, prompt_ids, completion_ids):
    s = llm.score([list(prompt_ids) + list(completion_ids)], use_tqdm=False)[0]
    return bits(s.logprobs[-len(completion_ids):])


def test_rollout_func_protocol_and_ratio_one(llm):
    norm = "model.norm.weight"
    base = {norm: llm.get_parameter(norm)}
    rf = dtrl.make_rollout_func(llm, seed=7)
    prompts = ["The sea is", "The sea is", [{"role": "user", "content": "Name a colour."}]]
    out = rf(prompts, fake_trainer(llm, 0, base))
    assert set(out) == {"prompt_ids", "completion_ids", "logprobs"}
    assert len(out["prompt_ids"]) == len(out["completion_ids"]) == len(out["logprobs"]) == 3
    assert out["prompt_ids"][0] == llm.get_tokenizer().encode("The sea is")
    assert out["prompt_ids"][2] == llm.get_tokenizer().apply_chat_template(
        prompts[2], tokenize=True, add_generation_prompt=True)
    # the group's copies of one prompt are different draws
    assert out["completion_ids"][0] != out["completion_ids"][1]
    for p, c, lp in zip(out["prompt_ids"], out["completion_ids"], out["logprobs"]):
        assert 0 < len(c) <= 8 and len(lp) == len(c) and all(isinstance(x, float) for x in lp)
        # importance ratio exp(trainer - rollout) = 1 exactly with the engine's forward
        assert (bits(lp) == scored_completion_bits(llm, p, c)).all()
    assert llm.weight_version == "trl-step-0"
    # the same step and call index replays bit for bit
    rf2 = dtrl.make_rollout_func(llm, seed=7)
    again = rf2(prompts, fake_trainer(llm, 0, base))
    assert again["completion_ids"] == out["completion_ids"]
    assert all((bits(a) == bits(b)).all() for a, b in zip(again["logprobs"], out["logprobs"]))


def test_rollout_func_syncs_weights_when_the_step_changes(llm):
    norm = "model.norm.weight"
    old = llm.get_parameter(norm)
    new = (old * np.float32(1.5)).astype(np.float32)
    rf = dtrl.make_rollout_func(llm, seed=3)
    rf(["Once upon a time"], fake_trainer(llm, 0, {norm: old}))
    out = rf(["Once upon a time"], fake_trainer(llm, 1, {norm: new}))
    assert llm.weight_version == "trl-step-1"
    assert (bits(llm.get_parameter(norm)) == bits(new)).all()
    p, c, lp = out["prompt_ids"][0], out["completion_ids"][0], out["logprobs"][0]
    assert (bits(lp) == scored_completion_bits(llm, p, c)).all()

    # Negative control: a rollout that does not take the step-2 weights still runs the
    # step-1 ones, so its logprobs are not the scores under the trainer's step-2 weights.
    stale = dtrl.make_rollout_func(llm, seed=3, sync_weights=False)
    out2 = stale(["Once upon a time"], fake_trainer(llm, 2, {norm: old}))
    p2, c2, lp2 = out2["prompt_ids"][0], out2["completion_ids"][0], out2["logprobs"][0]
    llm.update_weights({norm: old}, version="trainer-step-2")
    assert not (bits(lp2) == scored_completion_bits(llm, p2, c2)).all()


def test_rollout_func_refusals(llm):
    rf = dtrl.make_rollout_func(llm, sync_weights=False)
    with pytest.raises(ValueError, match="temperature=0.7 with logprobs"):
        rf(["x y"], fake_trainer(llm, temperature=0.7))
    with pytest.raises(ValueError, match="best_of"):
        dtrl.make_rollout_func(llm, sync_weights=False, sampling_overrides={"best_of": 2})(
            ["x y"], fake_trainer(llm))
    with pytest.raises(ValueError, match="unknown argument"):
        dtrl.make_rollout_func(llm, nucleus=0.9)


# ---------------------------------------------------------------- TRL's vllm-serve protocol
def http(url, body=None, method=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def trl_url(llm):
    with trl_server.TrlServer(llm, port=0) as s:
        yield s.url


def gen_body(prompts, **kw):
    """VLLMClient.generate's body, field for field (trl/generation/vllm_client.py)."""
    b = {"prompts": prompts, "images": None, "n": 1, "repetition_penalty": 1.0, "temperature": 1.0,
         "top_p": 1.0, "top_k": 0, "min_p": 0.0, "max_tokens": 6, "logprobs": 0,
         "structured_outputs_regex": None, "generation_kwargs": {}}
    b.update(kw)
    return b


def test_trl_server_health_world_size_and_nccl_refusal(trl_url):
    assert http(trl_url + "/health/") == (200, {"status": "ok"})
    assert http(trl_url + "/get_world_size/") == (200, {"world_size": 1})
    st, body = http(trl_url + "/init_communicator/", {"host": "0.0.0.0", "port": 51216, "world_size": 2,
                                                      "client_device_uuid": "x"})
    assert st == 501 and "rollout_func" in body["detail"] and "--weight-transfer" in body["detail"]
    st, _ = http(trl_url + "/update_named_param/", {"name": "a", "dtype": "torch.float32", "shape": [1]})
    assert st == 501
    assert http(trl_url + "/reset_prefix_cache/", method="POST")[0] == 200
    assert http(trl_url + "/close_communicator/", method="POST")[0] == 200
    assert http(trl_url + "/nope/")[0] == 404


def test_trl_server_generate_matches_llm(trl_url, llm):
    ids = llm.get_tokenizer().encode("The capital of France is")
    st, r = http(trl_url + "/generate/", gen_body(["The capital of France is", ids], n=2,
                                                  generation_kwargs={"seed": 11}))
    assert st == 200, r
    assert r["prompt_ids"] == [ids, ids]
    assert len(r["completion_ids"]) == 4 and len(r["logprobs"]) == 4
    want = llm.generate(["The capital of France is"], detllm.SamplingParams(n=2, seed=11, max_tokens=6),
                        use_tqdm=False)[0]
    for k, c in enumerate(want.outputs):
        for j in (k, 2 + k):  # text and token-id prompts: the same request
            assert r["completion_ids"][j] == c.token_ids
            assert r["logprob_token_ids"][j] == [[t] for t in c.token_ids]
            assert (bits([x[0] for x in r["logprobs"][j]]) == bits(c.token_logprobs)).all()
    # top logprobs: up to logprobs + 1 by rank, the sampled token among them
    st, r = http(trl_url + "/generate/", gen_body([ids], logprobs=2, generation_kwargs={"seed": 11}))
    assert st == 200
    for row_lp, row_id, t in zip(r["logprobs"][0], r["logprob_token_ids"][0], r["completion_ids"][0]):
        assert 2 <= len(row_lp) <= 3 and t in row_id and row_lp == sorted(row_lp, reverse=True)


def test_trl_server_chat_and_refusals(trl_url, llm):
    conv = [{"role": "user", "content": "Name a colour."}]
    body = gen_body(None, generation_kwargs={"seed": 5})
    del body["prompts"], body["images"]
    body.update(messages=[conv], chat_template_kwargs={}, tools=None)
    st, r = http(trl_url + "/chat/", body)
    assert st == 200, r
    want = llm.chat(conv, detllm.SamplingParams(seed=5, max_tokens=6), use_tqdm=False)[0]
    assert r["prompt_ids"] == [want.prompt_token_ids]
    assert r["completion_ids"] == [want.outputs[0].token_ids]
    st, r = http(trl_url + "/generate/", gen_body(["a b"], temperature=0.5))
    assert st == 400 and "temperature=0.5 with logprobs" in r["detail"]
    st, r = http(trl_url + "/generate/", gen_body(["a b"], generation_kwargs={"best_of": 3}))
    assert st == 400 and "best_of" in r["detail"]
    st, r = http(trl_url + "/generate/", gen_body(["a b"], images=[["aGVsbG8="]]))
    assert st == 400 and "images" in r["detail"]
    st, r = http(trl_url + "/generate/", gen_body([]))
    assert st == 400


def test_trl_server_sequence_logprobs(trl_url, llm):
    seqs = [llm.get_tokenizer().encode("The sea is blue and the sky is grey"),
            llm.get_tokenizer().encode("One two three")]
    plens = [4, 1]
    body = {"sequences": seqs, "prompt_lengths": plens, "top_logprobs": 3, "temperature": 1.0,
            "response_format": "json"}
    st, r = http(trl_url + "/get_sequence_logprobs/", body)
    assert st == 200, r
    scores = llm.score(seqs, top_logprobs=3, use_tqdm=False)
    for s, pl, sc, lps, ids in zip(seqs, plens, scores, r["logprobs"], r["logprob_token_ids"]):
        assert len(lps) == len(s) - pl
        for t, pos in enumerate(range(pl, len(s))):
            top = sorted(((lp.rank, tid, lp.logprob) for tid, lp in sc.top_logprobs[pos - 1].items()
                          if lp.rank is not None))[:3]
            assert ids[t] == [tid for _, tid, _ in top]
            assert (bits(lps[t]) == bits([lp for _, _, lp in top])).all()
    body["response_format"] = "binary"
    st, b = http(trl_url + "/get_sequence_logprobs/", body)
    assert st == 200 and b["shape"] == [2, max(len(s) - p for s, p in zip(seqs, plens)), 3]
    assert b["completion_lengths"] == [len(s) - p for s, p in zip(seqs, plens)]
    act = np.frombuffer(base64.b64decode(b["actual_logprobs_b64"]), np.float32).reshape(2, -1)
    for i, (s, pl, sc) in enumerate(zip(seqs, plens, scores)):
        assert (bits(act[i, :len(s) - pl]) == bits(sc.logprobs[pl - 1:])).all()
    st, r = http(trl_url + "/get_sequence_logprobs/", dict(body, top_logprobs=100))
    assert st == 400 and "top_logprobs<=20" in r["detail"]
    st, r = http(trl_url + "/get_sequence_logprobs/", dict(body, prompt_lengths=[99, 1]))
    assert st == 400 and "prompt_length=99" in r["detail"]


# ---------------------------------------------------------------- verl
def test_verl_rollout_generate_seeds_and_batching(llm):
    r = dverl.DetllmRollout(llm, {"response_length": 8})
    ids = llm.get_tokenizer().encode("Write a word:")

    async def many():
        calls = [r.generate(ids, {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True},
                            request_id=f"req-{i}") for i in range(4)]
        return await asyncio.gather(*calls)

    try:
        together = asyncio.run(many())
        alone = asyncio.run(r.generate(ids, {"logprobs": True, "max_tokens": 8}, request_id="req-2"))
        nolp = asyncio.run(r.generate(ids, {"max_new_tokens": 3}, request_id="req-2"))
    finally:
        r.close()
    assert all(isinstance(t, dverl.TokenOutput) for t in together)
    assert together[2].token_ids == alone.token_ids  # seed from the request id; batch-invariant
    assert (bits(together[2].log_probs) == bits(alone.log_probs)).all()
    assert together[0].token_ids != together[1].token_ids
    assert nolp.log_probs is None and nolp.token_ids == alone.token_ids[:3]
    for t in together:
        assert t.stop_reason == "completed" and t.routed_experts is None
        assert (bits(t.log_probs) == scored_completion_bits(llm, ids, t.token_ids)).all()


def test_verl_rollout_weights_release_resume(llm):
    norm = "model.norm.weight"
    old = llm.get_parameter(norm)
    r = dverl.DetllmRollout(llm, {"response_length": 4})
    try:
        asyncio.run(r.release())
        assert llm.sleeping
        asyncio.run(r.resume(["weights"]))
        assert not llm.sleeping
        asyncio.run(r.resume(["kv_cache"]))
        asyncio.run(r.update_weights(iter([(norm, old * np.float32(0.5))]), global_steps=3))
        assert llm.weight_version == "verl-step-3"
        assert (bits(llm.get_parameter(norm)) == bits(old * np.float32(0.5))).all()
        with pytest.raises(ValueError, match="unknown tag"):
            asyncio.run(r.resume(["optimizer"]))
        bare = dverl.DetllmRollout(llm)
        try:
            with pytest.raises(ValueError, match="no max_tokens"):
                asyncio.run(bare.generate([1, 2], {}, "x"))
        finally:
            bare.close()
        with pytest.raises(detllm.Error, match="not a parameter"):
            asyncio.run(r.update_weights([("model.nope.weight", old)]))
    finally:
        asyncio.run(r.update_weights([(norm, old)], version="restored"))
        r.close()
