"""Across restarts (design.md V9, V11 and the execution settings): the same deterministic
requests sent to one `detllm serve` process, all at once, then to a fresh process with other
threads, step budget, chunking, batch limit, KV pool, block size and prefix-cache setting, one
at a time, give the same token ids, logprobs (compared as floats, never as re-encoded text),
prompt logprobs and fingerprint. A request that let the server draw its seed replays with the seed
the response returned, and every sampled completion, re-scored by the second process (echo,
teacher forcing), gets the logprobs it was generated with (the RL case). None of the settings
varied is in the fingerprint (src/determinism/fingerprint.h)."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import API_KEY, start_server

REQUESTS = [
    {"kind": "completion", "prompt": "The three primary colors are", "max_tokens": 12,
     "temperature": 0.0},
    {"kind": "completion", "prompt": "Once upon a time, in a small village,", "max_tokens": 16,
     "temperature": 0.9, "top_p": 0.95, "seed": 7, "n": 2},
    {"kind": "completion", "prompt": "List three animals:", "max_tokens": 10,
     "temperature": 1.2, "extra": {"top_k": 20}},  # no seed: the server draws one
    {"kind": "chat", "content": "Write a haiku about the sea.", "max_tokens": 20,
     "temperature": 0.7, "seed": 123},
    {"kind": "chat", "content": "What is 2 + 2?", "max_tokens": 8, "temperature": 0.0},
    {"kind": "score", "prompt": "The quick brown fox jumps over the lazy dog."},
]


def send(client, req, seed=None):
    """(fingerprint, seed used, [(token ids, logprobs)], prompt logprobs or None)."""
    kw = dict(model="default", max_tokens=req.get("max_tokens", 0),
              temperature=req.get("temperature", 1.0), top_p=req.get("top_p", 1.0),
              n=req.get("n", 1), extra_body=dict(req.get("extra", {})))
    if seed is not None or "seed" in req:
        kw["seed"] = seed if seed is not None else req["seed"]
    if req["kind"] == "chat":
        r = client.chat.completions.create(
            messages=[{"role": "user", "content": req["content"]}], logprobs=True,
            top_logprobs=2, **kw)
        outs = [([t.model_extra["token_id"] for t in c.logprobs.content],
                 [t.logprob for t in c.logprobs.content]) for c in r.choices]
        return r.system_fingerprint, r.model_extra.get("seed"), outs, None
    echo = req["kind"] == "score"
    r = client.completions.create(prompt=req["prompt"], logprobs=2, echo=echo, **kw)
    outs = [(c.logprobs.model_extra["token_ids"], c.logprobs.token_logprobs) for c in r.choices]
    return r.system_fingerprint, r.model_extra.get("seed"), outs, (outs[0] if echo else None)


def client_of(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0,
                         timeout=300)


def test_a_fresh_process_with_other_settings_replays_every_bit():
    first = start_server()
    try:
        c = client_of(first)
        with ThreadPoolExecutor(max_workers=len(REQUESTS)) as pool:  # batched together
            before = list(pool.map(lambda r: send(c, r), REQUESTS))
    finally:
        assert first.stop() == 0, "".join(first.log)
    second = start_server("--threads", "1", "--max-tokens-per-step", "48", "--chunk-size", "16",
                          "--max-seqs", "2", "--kv-cache-tokens", "4096", "--block-size", "5",
                          "--prefix-cache", "false")
    try:
        c = client_of(second)
        for req, (fp, seed, outs, prompt_lps) in zip(REQUESTS, before):
            assert isinstance(seed, int), (req, seed)  # every response says its seed
            again = send(c, req, seed=None if "seed" in req or req.get("temperature") == 0
                         else seed)
            assert again[0] == fp, (req, fp, again[0])
            assert again[2] == outs, req  # token ids and logprobs, bit for bit
            assert again[3] == prompt_lps, req
            assert all(len(ids) >= 1 for ids, _ in outs), (req, outs)
            if req["kind"] == "completion":
                # RL: the rollout's logprobs (sampled, batched, first process) are what scoring
                # prompt + completion gives (echo, teacher forcing) in the second process.
                prompt_ids = second.post("/tokenize", {"prompt": req["prompt"]}).json()["tokens"]
                for ids, lps in outs:
                    scored = send(c, {"kind": "score", "prompt": prompt_ids + ids})[3]
                    assert scored[0][len(prompt_ids):] == ids, req
                    assert scored[1][len(prompt_ids):] == lps, req
    finally:
        assert second.stop() == 0, "".join(second.log)
