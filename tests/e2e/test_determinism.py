"""Determinism through HTTP: 64 clients at once, with varied prompts, endpoints, streaming and
sampling settings, then every request replayed alone. Each deterministic request must get the
same token ids and logprobs (compared as ids and floats, never as re-encoded text); /metrics
shows that the 64 requests shared steps (else the comparison would not test batching)."""
import random
from concurrent.futures import ThreadPoolExecutor

from conftest import wait_until

N_CLIENTS = 64

SUBJECTS = ["the ocean", "a small robot", "winter mornings", "prime numbers", "an old map",
            "coffee", "the moon", "a lost key", "bicycles", "rainy cities", "dragons", "music"]


def make_requests():
    rng = random.Random(20261129)
    reqs = []
    for i in range(N_CLIENTS):
        subject = SUBJECTS[i % len(SUBJECTS)]
        words = " ".join(rng.choice(SUBJECTS) for _ in range(rng.randint(0, 6)))
        sampling = {
            "max_tokens": rng.randint(2, 6),
            "temperature": rng.choice([0.0, 0.5, 0.8, 1.0, 1.3]),
            "top_p": rng.choice([1.0, 0.9, 0.5]),
            "seed": rng.randrange(2**40),
        }
        extra = {}
        if rng.random() < 0.4:
            extra["top_k"] = rng.choice([5, 40])
        if rng.random() < 0.3:
            extra["min_p"] = 0.05
        if i % 9 == 4:
            extra["deterministic"] = False  # a non-deterministic neighbour (V10)
        req = {"kind": "chat" if i % 3 == 0 else "completion", "stream": i % 2 == 1,
               "n": 2 if i % 7 == 0 else 1, "sampling": sampling, "extra": extra}
        if req["kind"] == "chat":
            req["messages"] = [{"role": "user", "content": f"Say something about {subject}. {words}"}]
        else:
            req["prompt"] = f"Here is a short note about {subject}: {words}"
        reqs.append(req)
    return reqs


def run(client, req):
    """Returns (fingerprint, [(token ids, logprobs) per choice])."""
    common = dict(model="default", n=req["n"], stream=req["stream"],
                  extra_body=dict(req["extra"]), **req["sampling"])
    choices = {}
    fingerprint = None
    if req["kind"] == "chat":
        resp = client.chat.completions.create(messages=req["messages"], logprobs=True,
                                              top_logprobs=1, **common)
        for item in (resp if req["stream"] else [resp]):
            fingerprint = item.system_fingerprint
            for ch in item.choices:
                ids, lps = choices.setdefault(ch.index, ([], []))
                if ch.logprobs and ch.logprobs.content:
                    for t in ch.logprobs.content:
                        ids.append(t.model_extra["token_id"])
                        lps.append(t.logprob)
    else:
        resp = client.completions.create(prompt=req["prompt"], logprobs=1, **common)
        for item in (resp if req["stream"] else [resp]):
            fingerprint = item.system_fingerprint
            for ch in item.choices:
                ids, lps = choices.setdefault(ch.index, ([], []))
                if ch.logprobs:
                    ids.extend(ch.logprobs.model_extra["token_ids"])
                    lps.extend(ch.logprobs.token_logprobs)
    return fingerprint, [choices[k] for k in sorted(choices)]


def steps_and_tokens(server):
    m = server.metrics()
    return m["detllm_step_duration_seconds_count"], m["detllm_generation_tokens_total"]


def test_concurrent_equals_alone(client, server):
    reqs = make_requests()
    steps_before, tokens_before = steps_and_tokens(server)
    with ThreadPoolExecutor(max_workers=N_CLIENTS) as pool:
        together = list(pool.map(lambda r: run(client, r), reqs))
    assert len(together) == N_CLIENTS
    # The requests shared steps: run one at a time, each needs a step per token of its longest
    # choice (the prefill gives the first), so fewer steps than that sum means batching.
    # Counters move after the responses are written: poll until every token is counted.
    n_tokens = sum(len(ids) for _, outs in together for ids, _ in outs)
    assert wait_until(lambda: steps_and_tokens(server)[1] >= tokens_before + n_tokens, timeout=30)
    steps = steps_and_tokens(server)[0] - steps_before
    alone_steps = sum(max(len(ids) for ids, _ in outs) for _, outs in together)
    print(f"{N_CLIENTS} requests together: {steps:.0f} steps; one at a time: >= {alone_steps}")
    assert steps <= alone_steps / 4, (steps, alone_steps)
    mismatches = []
    for i, req in enumerate(reqs):
        alone = run(client, req)
        fp, outs = together[i]
        assert len(outs) == req["n"]
        assert all(len(ids) >= 1 for ids, _ in outs)
        if req["extra"].get("deterministic") is False:
            continue
        assert fp == alone[0]
        if outs != alone[1]:
            mismatches.append((i, req, outs, alone[1]))
    assert not mismatches, mismatches[:3]
    m = server.metrics()
    assert m["detllm_running_sequences"] == 0
