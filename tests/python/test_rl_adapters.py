"""The TRL and verl adapters (detllm/integrations/) against the frameworks' protocols, without
torch, TRL or verl (scripts/rl_check.sh runs them against the frameworks themselves).

- TRL rollout_func: the dict GRPOTrainer checks (one completion per prompt entry), the
  rollout's logprobs = llm.score of the same tokens bit for bit (importance ratio exactly 1
  with the engine's forward as the trainer's), the trainer's weights synchronised when its
  step changes; negative control: without the sync the rollout runs the old weights and its
  logprobs are not the new weights' scores.
- verl rollout: generate's TokenOutput, seeds from request ids (same id: same bits; batch
  of concurrent calls = each alone), update_weights/release/resume.

TRL's server mode talks to `detllm serve` itself: tests/e2e/test_trl_client_protocol.py.

Kept to a few seconds (CI): one engine for the file, on one thread (a pool of two threads on a
loaded 2-core machine waits for each other), a few tokens per completion, and every
sequence's score in one llm.score batch.
"""

import asyncio
import types

import numpy as np
import pytest

import detllm
from detllm.integrations import trl as dtrl
from detllm.integrations import verl as dverl

from conftest import bits, make_llm


@pytest.fixture(scope="module")
def llm():
    return make_llm(threads=1)


def fake_trainer(llm, step=0, params=None, **args):
    """What rollout_func reads of TRL's GRPOTrainer: args, state.global_step, the model (its
    named_parameters), the accelerator's process index."""
    a = dict(max_completion_length=4, temperature=1.0, top_p=1.0, top_k=None, min_p=None,
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
    """Each completion's logprobs as llm.score gives them for prompt + completion (one batch;
    the scores' bits do not depend on the batch)."""
    scores = llm.score([list(p) + list(c) for p, c in zip(prompt_ids, completion_ids)],
                       use_tqdm=False)
    return [bits(s.logprobs[-len(c):]) for s, c in zip(scores, completion_ids)]


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
    scored = scored_completion_bits(llm, out["prompt_ids"], out["completion_ids"])
    for c, lp, want in zip(out["completion_ids"], out["logprobs"], scored):
        assert 0 < len(c) <= 4 and len(lp) == len(c) and all(isinstance(x, float) for x in lp)
        # importance ratio exp(trainer - rollout) = 1 exactly with the engine's forward
        assert (bits(lp) == want).all()
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
    assert (bits(out["logprobs"][0]) ==
            scored_completion_bits(llm, out["prompt_ids"], out["completion_ids"])[0]).all()

    # Negative control: a rollout that does not take the step-2 weights still runs the
    # step-1 ones, so its logprobs are not the scores under the trainer's step-2 weights.
    stale = dtrl.make_rollout_func(llm, seed=3, sync_weights=False)
    out2 = stale(["Once upon a time"], fake_trainer(llm, 2, {norm: old}))
    llm.update_weights({norm: old}, version="trainer-step-2")
    assert not (bits(out2["logprobs"][0]) ==
                scored_completion_bits(llm, out2["prompt_ids"], out2["completion_ids"])[0]).all()


def test_rollout_func_refusals(llm):
    rf = dtrl.make_rollout_func(llm, sync_weights=False)
    with pytest.raises(ValueError, match="temperature=0.7 with logprobs"):
        rf(["x y"], fake_trainer(llm, temperature=0.7))
    with pytest.raises(ValueError, match="best_of"):
        dtrl.make_rollout_func(llm, sync_weights=False, sampling_overrides={"best_of": 2})(
            ["x y"], fake_trainer(llm))
    with pytest.raises(ValueError, match="unknown argument"):
        dtrl.make_rollout_func(llm, nucleus=0.9)


# ---------------------------------------------------------------- verl
def test_verl_rollout_generate_seeds_and_batching(llm):
    r = dverl.DetllmRollout(llm, {"response_length": 4})
    ids = llm.get_tokenizer().encode("Write a word:")

    async def many():
        calls = [r.generate(ids, {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True},
                            request_id=f"req-{i}") for i in range(3)]
        return await asyncio.gather(*calls)

    try:
        together = asyncio.run(many())
        alone = asyncio.run(r.generate(ids, {"logprobs": True, "max_tokens": 4}, request_id="req-2"))
        nolp = asyncio.run(r.generate(ids, {"max_new_tokens": 3}, request_id="req-2"))
    finally:
        r.close()
    assert all(isinstance(t, dverl.TokenOutput) for t in together)
    assert together[2].token_ids == alone.token_ids  # seed from the request id; batch-invariant
    assert (bits(together[2].log_probs) == bits(alone.log_probs)).all()
    assert together[0].token_ids != together[1].token_ids
    assert nolp.log_probs is None and nolp.token_ids == alone.token_ids[:3]
    scored = scored_completion_bits(llm, [ids] * len(together), [t.token_ids for t in together])
    for t, want in zip(together, scored):
        assert t.stop_reason == "completed" and t.routed_experts is None
        assert (bits(t.log_probs) == want).all()


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
