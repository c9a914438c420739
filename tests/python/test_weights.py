"""update_weights / sleep / wake on the default model (CPU). The test CI runs for the issue's
claim: logprobs from llm.generate (rollout), from llm.score and from re-scoring after two
update_weights calls are bit-identical (numpy float32 bit patterns)."""

import numpy as np
import pytest

import detllm
from conftest import TEST_BACKEND, bits, make_llm

PROMPTS = ["The capital of France is", "Write a poem about the sea", "import numpy as np"]
SP = detllm.SamplingParams(max_tokens=8, temperature=1.0, seed=1234)


def rollout_and_score(llm):
    """(sequences, rollout logprobs of the generated tokens, the same positions re-scored)."""
    out = llm.generate(PROMPTS, SP, use_tqdm=False)
    seqs = [r.prompt_token_ids + r.outputs[0].token_ids for r in out]
    gen = [r.outputs[0].token_logprobs for r in out]
    scored = llm.score(seqs, use_tqdm=False)
    rescored = [s.logprobs[len(seq) - 1 - len(g):] for s, seq, g in zip(scored, seqs, gen)]
    return seqs, gen, rescored, out[0].fingerprint


def perturbed(llm, names, scale, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for n in names:
        a = llm.get_parameter(n)
        out[n] = (a * (1 + scale * rng.standard_normal(a.shape))).astype(np.float32)
    return out


def test_rollout_score_and_rescore_after_two_updates_are_bit_identical(llm):
    names = ["model.layers.0.mlp.down_proj.weight", "model.layers.5.self_attn.q_proj.weight",
             "model.norm.weight"]
    original = {n: llm.get_parameter(n) for n in names}
    seqs0, gen0, res0, fp0 = rollout_and_score(llm)
    for g, r in zip(gen0, res0):
        assert np.array_equal(bits(g), bits(r))
    fingerprints = {fp0}
    previous, previous_gen = seqs0, gen0
    for step in (1, 2):
        new = perturbed(llm, names, 0.05, step)
        llm.update_weights(new, version=f"step-{step}")
        assert llm.weight_version == f"step-{step}"
        for n in names:
            assert np.array_equal(bits(llm.get_parameter(n)), bits(new[n]))
        seqs, gen, res, fp = rollout_and_score(llm)
        for g, r in zip(gen, res):
            assert np.array_equal(bits(g), bits(r))  # rollout == trainer-side re-score
        # the new weights are the ones computing: the previous rollout scores differently now
        old = llm.score(previous, use_tqdm=False)
        assert any(not np.array_equal(bits(s.logprobs[len(q) - 1 - len(g):]), bits(g))
                   for s, q, g in zip(old, previous, previous_gen))
        fingerprints.add(fp)
        previous, previous_gen = seqs, gen
    assert len(fingerprints) == 3  # each version its own fingerprint
    # back to the loaded values: the first rollout's bits again (no KV of the other weights
    # was reused: the prefix cache went with every update)
    llm.update_weights(original, version="original")
    seqs, gen, res, _ = rollout_and_score(llm)
    assert seqs == seqs0
    for a, b in zip(gen, gen0):
        assert np.array_equal(bits(a), bits(b))


def test_update_changes_the_numbers(llm):
    seq = llm.get_tokenizer().encode("The capital of France is Paris")
    before = llm.score([seq], use_tqdm=False)[0].logprobs
    name = "model.layers.3.mlp.up_proj.weight"
    w = llm.get_parameter(name)
    llm.update_weights({name: w * np.float32(1.5)}, version="scaled")
    after = llm.score([seq], use_tqdm=False)[0].logprobs
    llm.update_weights({name: w}, version="restored")
    again = llm.score([seq], use_tqdm=False)[0].logprobs
    assert not np.array_equal(bits(before), bits(after))
    assert np.array_equal(bits(before), bits(again))


def test_prefix_cache_is_invalidated(llm):
    """A prompt generated twice hits the prefix cache; after an update it must not."""
    prompt = llm.get_tokenizer().encode("A long shared system prompt: you are a helpful assistant. " * 4)
    sp = detllm.SamplingParams(max_tokens=2, temperature=0.0)
    llm.generate([prompt], sp, use_tqdm=False)
    hit = llm.generate([prompt], sp, use_tqdm=False)[0].outputs[0].cached_tokens
    assert hit > 0
    name = "model.norm.weight"
    llm.update_weights({name: llm.get_parameter(name)}, version="same-values")
    assert llm.generate([prompt], sp, use_tqdm=False)[0].outputs[0].cached_tokens == 0


def test_bad_updates_name_every_offender_and_write_nothing(llm):
    seq = llm.get_tokenizer().encode("Deterministic inference")
    before = llm.score([seq], use_tqdm=False)[0].logprobs
    good = "model.layers.1.mlp.gate_proj.weight"
    bad = {
        good: llm.get_parameter(good) * 0,  # valid, but must not be written
        "model.layers.0.mlp.nonexistent.weight": np.zeros(3, np.float32),
        "model.norm.weight": np.zeros(7, np.float32),
        "model.layers.2.input_layernorm.weight": llm.get_parameter(
            "model.layers.2.input_layernorm.weight").astype(np.float64),
    }
    with pytest.raises(detllm.Error) as e:
        llm.update_weights(bad, version="bad")
    msg = str(e.value)
    assert "3 problems" in msg and "nothing was written" in msg
    assert "model.layers.0.mlp.nonexistent.weight: not a parameter" in msg
    assert "model.norm.weight: shape [7]" in msg
    assert "model.layers.2.input_layernorm.weight: dtype float64" in msg
    assert good not in msg
    after = llm.score([seq], use_tqdm=False)[0].logprobs
    assert np.array_equal(bits(before), bits(after))


def test_float16_widens_exactly(llm):
    name = "model.layers.4.post_attention_layernorm.weight"
    orig = llm.get_parameter(name)
    half = orig.astype(np.float16)
    llm.update_weights({name: half}, version="fp16")
    assert np.array_equal(bits(llm.get_parameter(name)), bits(half.astype(np.float32)))
    llm.update_weights({name: orig}, version="restored")


def test_tied_embeddings_alias(llm):
    if not llm.config["tied_embeddings"]:
        pytest.skip("the model does not tie its embeddings")
    emb = llm.get_parameter("model.embed_tokens.weight")
    # a state_dict holds both names for one tensor: equal values pass, other values do not
    llm.update_weights({"model.embed_tokens.weight": emb, "lm_head.weight": emb}, version="tied")
    with pytest.raises(detllm.Error, match="tied embeddings"):
        llm.update_weights({"model.embed_tokens.weight": emb, "lm_head.weight": emb + 1},
                           version="x")


def test_sleep_and_wake(llm):
    sp = detllm.SamplingParams(max_tokens=4, temperature=0.0)
    before = llm.generate(PROMPTS[:1], sp, use_tqdm=False)[0].outputs[0]
    llm.sleep(1)
    assert llm.sleeping
    with pytest.raises(detllm.Error, match="wake"):
        llm.generate(PROMPTS[:1], sp, use_tqdm=False)
    llm.wake_up()
    after = llm.generate(PROMPTS[:1], sp, use_tqdm=False)[0].outputs[0]
    assert after.token_ids == before.token_ids
    assert np.array_equal(bits(after.token_logprobs), bits(before.token_logprobs))
    with pytest.raises(detllm.Error, match="level"):
        llm.sleep(3)


def test_synthetic_model_token_ids_and_updates():
    """synthetic:NAME (model/synthetic.h): weights from a seed, no tokenizer. On a device
    backend the weights exist only in device memory (the 8B update benchmark's model)."""
    llm = make_llm(model="synthetic:tiny-llama")
    assert llm.model_name == "synthetic:tiny-llama"
    with pytest.raises(detllm.Error, match="no tokenizer"):
        llm.generate(["text"], use_tqdm=False)
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9]]
    sp = detllm.SamplingParams(max_tokens=6, temperature=1.0, seed=5, logprobs=2)
    out = llm.generate(prompts, sp, use_tqdm=False)
    seqs = [r.prompt_token_ids + r.outputs[0].token_ids for r in out]
    assert all(r.outputs[0].text == "" for r in out)
    scored = llm.score(seqs, use_tqdm=False)
    for r, s in zip(out, scored):
        g = r.outputs[0].token_logprobs
        assert np.array_equal(bits(s.logprobs[-len(g):]), bits(g))
    name = "model.layers.1.mlp.up_proj.weight"
    w = llm.get_parameter(name)
    assert w.shape == llm.parameter_shape(name) and np.isfinite(w).all() and w.any()
    llm.update_weights({name: w * np.float32(2)}, version="x2")
    changed = llm.score(seqs, use_tqdm=False)
    assert not all(np.array_equal(bits(a.logprobs), bits(b.logprobs)) for a, b in zip(changed, scored))
    llm.update_weights({name: w}, version="back")
    again = llm.score(seqs, use_tqdm=False)
    for a, b in zip(again, scored):
        assert np.array_equal(bits(a.logprobs), bits(b.logprobs))
    if TEST_BACKEND == "cpu":
        with pytest.raises(detllm.Error, match="needs a device backend"):
            detllm.LLM(model="synthetic:llama-3.1-8b", backend="cpu")
    else:
        with pytest.raises(detllm.Error, match="only in device memory"):
            llm.sleep(2)
    with pytest.raises(detllm.Error, match="tiny-llama"):
        detllm.LLM(model="synthetic:no-such-model", backend=TEST_BACKEND)


def test_cpu_forward_reads_the_gguf_blocks_until_the_first_update():
    """On the CPU a GGUF's blocks are what the forward reads (as `detllm bench` does: a Q4_1
    matrix is a sixth of its fp32 bytes) until the first update_weights moves it onto the host
    fp32 weights. Both forwards give the same bits; an update after the move reaches the
    forward (the negative control: new values change the output, the old ones restore it)."""
    if TEST_BACKEND != "cpu":
        pytest.skip("the stored-block forward is the CPU backend's")
    llm = make_llm(threads=2)
    assert llm._s.forward_reads_blocks, "the CPU session widened the GGUF's blocks at load"
    sp = detllm.SamplingParams(max_tokens=12, temperature=1.0, seed=7, logprobs=3)
    on_blocks = llm.generate(PROMPTS, sp, use_tqdm=False)
    name = "model.norm.weight"
    old = llm.get_parameter(name)
    llm.update_weights({name: old}, version="same-values")  # the same values: the move alone
    assert not llm._s.forward_reads_blocks
    on_f32 = llm.generate(PROMPTS, sp, use_tqdm=False)
    for a, b in zip(on_blocks, on_f32):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert (bits(a.outputs[0].token_logprobs) == bits(b.outputs[0].token_logprobs)).all()
    assert (bits(llm.get_parameter(name)) == bits(old)).all()
    llm.update_weights({name: old * np.float32(1.25)}, version="scaled")
    scaled = llm.generate(PROMPTS, sp, use_tqdm=False)
    assert any(a.outputs[0].token_ids != b.outputs[0].token_ids or
               (bits(a.outputs[0].token_logprobs) != bits(b.outputs[0].token_logprobs)).any()
               for a, b in zip(on_f32, scaled)), "the update did not reach the forward"
    llm.update_weights({name: old}, version="restored")
    restored = llm.generate(PROMPTS, sp, use_tqdm=False)
    for a, b in zip(on_blocks, restored):
        assert (bits(a.outputs[0].token_logprobs) == bits(b.outputs[0].token_logprobs)).all()
