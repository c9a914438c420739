"""The FP8 numerics class from Python (docs/python.md, docs/models.md "FP8"): vLLM's
`LLM(quantization="fp8", kv_cache_dtype="fp8")` on the default model. Each class replays its
bits (a seeded request alone and inside a batch: the same token ids and logprob bits), has a
fingerprint of its own, and scoring its output gives the generation's logprob bits (V4); names
vLLM has and detllm does not (an E5M2 cache, other quantizations) are refused by name. The
logits are a tolerance away from the unquantized model's: stated below, not bits. A
compressed-tensors checkpoint that stores its FP8 KV scales (tests/data/fp8/ct_kv) runs them
under kv_cache_dtype="fp8" and is refused without a KV dtype.
"""
import json
import os

import numpy as np
import pytest

import detllm
from conftest import bits, byte_tokenizer, make_llm

FP8_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "fp8")

PROMPT = "Rewrite in plain words: the committee postponed the vote until further notice."


def seeded(max_tokens=12, seed=7):
    return detllm.SamplingParams(max_tokens=max_tokens, temperature=0.8, seed=seed, logprobs=0,
                                 ignore_eos=True)


def run(llm, prompts):
    out = llm.generate(prompts, seeded())
    return [(list(o.outputs[0].token_ids),
             bits([lp[t].logprob for lp, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)]))
            for o in out]


@pytest.fixture(scope="module")
def engines():
    return {"plain": make_llm(), "fp8": make_llm(quantization="fp8"),
            "fp8+kv": make_llm(quantization="fp8", kv_cache_dtype="fp8"),
            "kv": make_llm(kv_cache_dtype="fp8_e4m3")}


def test_each_class_replays_its_bits_alone_and_in_a_batch(engines):
    for name in ("fp8", "fp8+kv", "kv"):
        llm = engines[name]
        alone = run(llm, [PROMPT])[0]
        batch = run(llm, ["Count to ten.", PROMPT, "Name three rivers of Europe."])[1]
        assert alone[0] == batch[0], name
        assert np.array_equal(alone[1], batch[1]), name + ": logprob bits differ in a batch"


def test_each_class_has_a_fingerprint_of_its_own(engines):
    prints = {name: llm.fingerprint for name, llm in engines.items()}
    assert len(set(prints.values())) == 4, prints


def test_scoring_the_output_gives_the_generation_bits(engines):
    llm = engines["fp8+kv"]
    tok = llm.get_tokenizer()
    prompt_ids = tok.encode(PROMPT)
    ids, lp_bits = run(llm, [{"prompt_token_ids": prompt_ids}])[0]
    scored = llm.score([prompt_ids + ids])[0].logprobs  # [i]: token i + 1's
    assert np.array_equal(bits(scored[len(prompt_ids) - 1:]), lp_bits)


def test_fp8_logits_are_close_to_the_unquantized_model(engines):
    # A tolerance, not bits: FP8 weights (and KV) are another numerics class. On the default
    # model the mean |delta logprob| of teacher-forced tokens is about 0.2 (python/bench/fp8_accuracy.py).
    tok = engines["plain"].get_tokenizer()
    seq = tok.encode(PROMPT + " The vote will take place next month, after the report.")
    ref = np.asarray(engines["plain"].score([seq])[0].logprobs, dtype=np.float64)
    for name in ("fp8", "fp8+kv"):
        got = np.asarray(engines[name].score([seq])[0].logprobs, dtype=np.float64)
        d = np.abs(got - ref).mean()
        assert 0 < d < 0.5, f"{name}: mean |delta logprob| {d}"


def test_unsupported_names_are_refused():
    with pytest.raises(Exception, match="fp8_e5m2"):
        make_llm(kv_cache_dtype="fp8_e5m2")
    with pytest.raises(Exception, match="awq"):
        make_llm(quantization="awq")


def test_weight_updates_and_reads_are_refused_by_name(engines):
    llm = engines["fp8"]
    name = next(n for n in llm.parameter_names() if n.endswith("q_proj.weight"))
    before = run(llm, [PROMPT])[0]
    with pytest.raises(Exception, match="FP8"):
        llm.update_weights({name: np.zeros(llm.parameter_shape(name), dtype=np.float32)},
                           version="step-1")
    with pytest.raises(Exception, match="FP8"):
        llm.get_parameter(name)
    after = run(llm, [PROMPT])[0]  # still serving, the same bits
    assert before[0] == after[0] and np.array_equal(before[1], after[1])


def fp8_checkpoint(tmp_path, case):
    """tests/data/fp8/<case> with a tokenizer of its 128 ids (the tests give token ids)."""
    for f in ("config.json", "model.safetensors"):
        os.symlink(os.path.abspath(os.path.join(FP8_DATA, case, f)), tmp_path / f)
    (tmp_path / "tokenizer.json").write_text(json.dumps(byte_tokenizer(128)))
    return str(tmp_path)


def reference_logprobs(case):
    """The tokens of the checkpoint's first reference sequence and the logprob of each given
    the ones before it, from transformers' forward with the FP8 arithmetic
    (scripts/ref/fp8_checkpoints.py)."""
    with open(os.path.join(FP8_DATA, case, "golden.json")) as f:
        ids = json.load(f)["sequences"][0]["tokens"]
    ref = np.fromfile(os.path.join(FP8_DATA, case, "logits.f32"), dtype="<f4")
    ref = ref[:len(ids) * 128].reshape(len(ids), 128).astype(np.float64)
    ref = ref - ref.max(axis=1, keepdims=True)
    ref_lp = ref - np.log(np.exp(ref).sum(axis=1, keepdims=True))
    return ids, np.array([ref_lp[i, ids[i + 1]] for i in range(len(ids) - 1)])


# A tolerance for the order of fp32 sums against torch's (tests/model/fp8_checkpoint_test.cpp
# measures the logits within 4.2e-7); the dequantized forward (activations not rounded) is
# 7e-3 away, a full-precision KV cache 3e-2.
REF_TOL = 1e-5


def test_an_fp8_checkpoint_runs_its_fp8_arithmetic(tmp_path):
    ids, want = reference_logprobs("ct_channel")
    llm = make_llm(backend="cpu", model=fp8_checkpoint(tmp_path, "ct_channel"))
    got = np.asarray(llm.score([ids])[0].logprobs, dtype=np.float64)
    assert np.abs(got - want).max() < REF_TOL, np.abs(got - want).max()


def test_checkpoint_kv_scales_run_under_an_fp8_cache_only(tmp_path):
    path = fp8_checkpoint(tmp_path, "ct_kv")
    ids, want = reference_logprobs("ct_kv")
    # No KV dtype: refused, saying what to pass, rather than run without the stored scales.
    with pytest.raises(Exception, match="kv_cache_dtype='fp8'"):
        make_llm(backend="cpu", model=path)
    fp8 = make_llm(backend="cpu", model=path, kv_cache_dtype="fp8")
    got = np.asarray(fp8.score([ids])[0].logprobs, dtype=np.float64)
    assert np.abs(got - want).max() < REF_TOL, np.abs(got - want).max()
    again = fp8.score([ids[:7], ids])[1].logprobs  # beside another sequence: the same bits
    assert np.array_equal(bits(again), bits(got))
    # Explicitly full precision: runs without the scales, another numerics (and fingerprint).
    f32 = make_llm(backend="cpu", model=path, kv_cache_dtype="fp32")
    other = np.asarray(f32.score([ids])[0].logprobs, dtype=np.float64)
    assert np.abs(other - want).max() > 1e-3
    assert f32.fingerprint != fp8.fingerprint
