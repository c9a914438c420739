"""detllm.LLM on the default model (CPU): generation, scoring and results, errors as Python
exceptions with the engine's message, the GIL released while the engine runs, the progress bar."""

import re
import threading

import numpy as np
import pytest

import detllm
from conftest import bits, make_llm

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time", "1, 2, 3, 4,"]


def test_generate_returns_vllm_shaped_results(llm):
    sp = detllm.SamplingParams(max_tokens=6, temperature=0.0, logprobs=3, seed=7)
    out = llm.generate(PROMPTS[:2], sp, use_tqdm=False)
    assert len(out) == 2
    for r, p in zip(out, PROMPTS):
        assert r.prompt == p
        assert r.prompt_token_ids == llm.get_tokenizer().encode(p)
        assert r.seed == 7
        assert re.fullmatch(r"fp_[0-9a-f]{16}", r.fingerprint)
        (c,) = r.outputs
        assert len(c.token_ids) == 6 and c.finish_reason == "length"
        assert c.token_logprobs.dtype == np.float32 and c.token_logprobs.shape == (6,)
        assert np.all(c.token_logprobs <= 0)
        assert c.text == llm.get_tokenizer().decode(c.token_ids, skip_special_tokens=True)
        # vLLM's per-token dicts: the top 3 with ranks, the sampled token among them (greedy)
        for tok, lp, d in zip(c.token_ids, c.token_logprobs, c.logprobs):
            assert len(d) == 3 and d[tok].rank == 1
            assert np.float32(d[tok].logprob) == lp


def test_token_id_prompts_and_seeds(llm):
    ids = llm.get_tokenizer().encode("Hello, my name is")
    a = llm.generate([ids, {"prompt_token_ids": ids}], detllm.SamplingParams(max_tokens=5, seed=3),
                     use_tqdm=False)
    assert a[0].prompt is None and a[0].prompt_token_ids == ids
    assert a[0].outputs[0].token_ids == a[1].outputs[0].token_ids  # same seed, same tokens
    drawn = llm.generate(ids, detllm.SamplingParams(max_tokens=5), use_tqdm=False)[0]
    replay = llm.generate(ids, detllm.SamplingParams(max_tokens=5, seed=drawn.seed),
                          use_tqdm=False)[0]
    assert replay.outputs[0].token_ids == drawn.outputs[0].token_ids
    assert np.array_equal(bits(replay.outputs[0].token_logprobs), bits(drawn.outputs[0].token_logprobs))


def test_batch_equals_alone_bitwise(llm):
    """V1 from Python: a prompt in a batch of four has the bits it has alone."""
    sp = detllm.SamplingParams(max_tokens=8, temperature=0.8, seed=11)
    batch = llm.generate(PROMPTS, sp, use_tqdm=False)
    assert llm._s.n_engine_steps_last_call < 4 * 8  # the four shared steps
    alone = llm.generate(PROMPTS[2], sp, use_tqdm=False)[0]
    assert alone.outputs[0].token_ids == batch[2].outputs[0].token_ids
    assert np.array_equal(bits(alone.outputs[0].token_logprobs), bits(batch[2].outputs[0].token_logprobs))


def test_score_equals_generation_bitwise(llm):
    sp = detllm.SamplingParams(max_tokens=10, temperature=1.0, seed=5, n=2)
    out = llm.generate(PROMPTS, sp, use_tqdm=False)
    seqs, rollout = [], []
    for r in out:
        for c in r.outputs:
            seqs.append(r.prompt_token_ids + c.token_ids)
            rollout.append(c.token_logprobs)
    scored = llm.score(seqs, use_tqdm=False)
    for seq, s, lp in zip(seqs, scored, rollout):
        assert s.logprobs.dtype == np.float32 and s.logprobs.shape == (len(seq) - 1,)
        gen = s.logprobs[len(seq) - 1 - len(lp):]
        assert np.array_equal(bits(gen), bits(lp))
    assert scored[0].fingerprint == out[0].fingerprint


def test_large_scoring_steps_equal_small_ones(llm):
    """A step of >= 171 scored rows (49k vocabulary) computes its logprobs on every core, in
    parts of rows; the bits must be those of steps too small for that (serial rows)."""
    rng = np.random.default_rng(11)
    seqs = [rng.integers(0, llm.config["vocab_size"], size=n).tolist() for n in (300, 190)]
    big = llm.score(seqs, use_tqdm=False)
    small = make_llm(max_num_batched_tokens=64).score(seqs, use_tqdm=False)
    for a, b in zip(big, small):
        assert np.array_equal(bits(a.logprobs), bits(b.logprobs))


def test_score_top_logprobs(llm):
    seq = llm.get_tokenizer().encode("The quick brown fox jumps")
    (s,) = llm.score([seq], top_logprobs=2, use_tqdm=False)
    assert len(s.top_logprobs) == len(seq) - 1
    for tok, lp, d in zip(seq[1:], s.logprobs, s.top_logprobs):
        assert np.float32(d[tok].logprob) == lp
        ranked = sorted((v.rank for v in d.values() if v.rank is not None))
        assert ranked == [1, 2]


def test_engine_errors_are_python_exceptions(llm):
    vocab = llm.config["vocab_size"]
    with pytest.raises(detllm.Error, match=f"{vocab + 5} is outside the vocabulary"):
        llm.generate([[1, 2, vocab + 5]], use_tqdm=False)
    with pytest.raises(RuntimeError):  # detllm.Error is a RuntimeError
        llm.generate([[1, 2]], detllm.SamplingParams(top_p=0.0), use_tqdm=False)
    with pytest.raises(ValueError, match="logprobs"):
        detllm.SamplingParams(logprobs=50)
    # the engine is usable after a refused batch
    assert llm.generate("Hi", detllm.SamplingParams(max_tokens=2, seed=1), use_tqdm=False)[0].outputs[0].token_ids


def test_gil_released_while_engine_runs(llm):
    sp = detllm.SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    done = threading.Event()
    ticks = 0

    def run():
        llm.generate(PROMPTS, sp, use_tqdm=False)
        done.set()

    t = threading.Thread(target=run)
    t.start()
    while not done.is_set():
        ticks += 1
    t.join()
    # Holding the GIL for the whole call would leave this loop a handful of iterations.
    assert ticks > 10_000, ticks


def test_progress_bar_on_long_batches(llm, capsys):
    prompts = [f"Count {i}:" for i in range(detllm.llm.PROGRESS_MIN_REQUESTS)]
    llm.generate(prompts, detllm.SamplingParams(max_tokens=2, seed=0))
    err = capsys.readouterr().err
    assert "detllm generate" in err and f"{len(prompts)}/{len(prompts)}" in err


def test_concurrent_calls_from_threads(llm):
    """Two threads share one LLM: calls run one at a time, each with its own bits."""
    sp = detllm.SamplingParams(max_tokens=6, temperature=1.0, seed=21)
    expected = [llm.generate(p, sp, use_tqdm=False)[0].outputs[0] for p in PROMPTS[:2]]
    got = [None, None]

    def run(i):
        got[i] = llm.generate(PROMPTS[i], sp, use_tqdm=False)[0].outputs[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e, g in zip(expected, got):
        assert g.token_ids == e.token_ids
        assert np.array_equal(bits(g.token_logprobs), bits(e.token_logprobs))


def test_exception_in_progress_stops_the_batch(llm):
    """A Python exception raised between steps (as Ctrl-C is) aborts the batch's requests and
    comes out of generate; the engine serves the next call."""
    class Stop(Exception):
        pass

    calls = []

    def progress(done, total):
        calls.append(done)
        if len(calls) == 3:
            raise Stop("from the progress callback")
        return True

    sp = detllm.SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)
    reqs = [sp._request(llm.get_tokenizer().encode(p)) for p in PROMPTS]
    with pytest.raises(Stop, match="progress callback"):
        llm._s.generate(reqs, progress)
    assert len(calls) == 3  # stopped after the third step, not at the end of the batch
    out = llm.generate(PROMPTS[0], detllm.SamplingParams(max_tokens=3, temperature=0.0),
                       use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3
