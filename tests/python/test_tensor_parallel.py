"""detllm.LLM(tensor_parallel=N) on the CPU (docs/tensor_parallel.md): the ranks' bits and
fingerprint do not depend on N — sampled tokens, their logprobs and prompt scores compared bit
for bit across N = 1, 2, 3, before and after a weight update — and what the ranks cannot do yet
(sleep) is refused by name."""

import numpy as np
import pytest

import detllm
from conftest import TEST_BACKEND, bits, make_llm

pytestmark = pytest.mark.skipif(TEST_BACKEND != "cpu", reason="tensor parallelism runs on the CPU backend")

PROMPTS = ["The capital of France is", "def fibonacci(n):"]


def run(llm):
    sp = detllm.SamplingParams(max_tokens=6, temperature=0.8, top_p=0.95, seed=13, logprobs=2,
                               prompt_logprobs=0)
    out = llm.generate(PROMPTS, sp, use_tqdm=False)
    return [(r.outputs[0].token_ids, bits(r.outputs[0].token_logprobs),
             [p for p in r.prompt_logprobs if p is not None], r.fingerprint) for r in out]


def test_every_degree_gives_the_same_bits_and_fingerprint():
    base = run(make_llm(tensor_parallel_size=1, threads=2))
    for n in (2, 3):
        got = run(make_llm(tensor_parallel_size=n, threads=2))
        for (t0, lp0, pl0, fp0), (t1, lp1, pl1, fp1) in zip(base, got):
            assert t1 == t0, f"tensor_parallel={n}: other tokens"
            assert np.array_equal(lp1, lp0), f"tensor_parallel={n}: other logprob bits"
            assert [bits(np.float32([d[k].logprob for k in sorted(d)])).tolist() for d in pl1] == \
                   [bits(np.float32([d[k].logprob for k in sorted(d)])).tolist() for d in pl0]
            assert fp1 == fp0  # the degree is not part of the numerics
    # The one-device model is other numerics (its own row-parallel chunks): another fingerprint.
    one = run(make_llm(threads=2))
    assert one[0][3] != base[0][3]


# A column-parallel (q) and a row-parallel (down: canonical chunks) weight of layer 0.
UPDATED = ["model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight"]


def test_update_weights_reaches_every_rank():
    """The same update at N = 1, 2, 3: the same bits after it at every N, not the bits before."""
    results = []
    for n in (1, 2, 3):
        llm = make_llm(tensor_parallel_size=n, threads=2)
        before = run(llm)
        new = {name: llm.get_parameter(name) * np.float32(0.5) for name in UPDATED}
        llm.update_weights(new, version="step-1")
        for name in UPDATED:  # the host copy holds what was written
            assert np.array_equal(llm.get_parameter(name), new[name])
        after = run(llm)
        assert any(a[0] != b[0] or not np.array_equal(a[1], b[1]) for a, b in zip(after, before)), \
            f"tensor_parallel={n}: the update changed nothing"
        results.append(after)
    for n, got in zip((2, 3), results[1:]):
        for (t0, lp0, _, fp0), (t1, lp1, _, fp1) in zip(results[0], got):
            assert t1 == t0 and np.array_equal(lp1, lp0), f"tensor_parallel={n} after the update"
            assert fp1 == fp0


def test_what_the_ranks_cannot_do_yet_is_refused_by_name():
    llm = make_llm(tensor_parallel_size=2, threads=2)
    with pytest.raises(RuntimeError, match="tensor_parallel=2"):
        llm.sleep(1)
    # Still serving after the refusal.
    assert len(llm.generate("Hi", detllm.SamplingParams(max_tokens=2), use_tqdm=False)) == 1


def test_a_synthetic_model_is_refused_with_tensor_parallel():
    with pytest.raises(RuntimeError, match="synthetic model"):
        detllm.LLM("synthetic:tiny-llama", tensor_parallel_size=2)
