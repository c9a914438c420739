"""detllm.ray: replicas as Ray actors behind one router (docs/ray.md).

Two `detllm serve` replicas of the default model on a local Ray instance (loopback), the
router in this process, and the session's single server (conftest) as the reference:

- 64 seeded requests through the router = the same requests on the single engine, bit for bit;
- a replica killed (SIGKILL of its pid) under 16 streams: every deterministic stream completes
  with exactly the uninterrupted run's tokens, logprobs and text (none repeated, none missing);
  the non-deterministic requests behave as the router is configured;
- a replica on other weights is refused, naming the fingerprint field that differs.
"""
import json
import os
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import API_KEY, DEFAULT_MODEL, ROOT, find_binary, wait_until

sys.path.insert(0, os.path.join(ROOT, "python"))

ray = pytest.importorskip("ray")

SERVE_ARGS = ["--model", DEFAULT_MODEL, "--threads", "1", "--kv-cache-tokens", "8192",
              "--max-tokens-per-step", "512"]
PREFIX = "A story about"  # every kill-test prompt starts so: prefix affinity puts them together


@pytest.fixture(scope="module")
def replicas():
    from detllm.ray import ReplicaSet

    binary = find_binary()
    if binary is None or not os.path.exists(DEFAULT_MODEL):
        pytest.skip("needs the detllm binary and the default model")
    rs = ReplicaSet(2, SERVE_ARGS, binary=binary, api_key=API_KEY, ray_num_cpus=4,
                    affinity_chars=len(PREFIX), affinity_slack=64, health_interval=0.2)
    rs.start()
    yield rs
    rs.shutdown()
    ray.shutdown()


def post(base, path, body, **kw):
    return requests.post(base + path, json=body, timeout=300,
                         headers={"Authorization": f"Bearer {API_KEY}"}, **kw)


def completion_request(i):
    if i % 4 == 3:
        return "/v1/chat/completions", {
            "messages": [{"role": "user", "content": f"Name {i % 7 + 2} animals."}],
            "max_tokens": 8, "temperature": 0.9, "seed": 1000 + i, "logprobs": True}
    return "/v1/completions", {"prompt": f"Request {i}: the weather today is",
                               "max_tokens": 8, "temperature": 0.8, "seed": 1000 + i,
                               "logprobs": 1}


def essentials(path, r):
    """What must be bit-identical: token ids, logprobs (exact floats), text, fingerprint, seed."""
    c = r["choices"][0]
    if path.endswith("chat/completions"):
        toks = [(t["token_id"], t["logprob"]) for t in c["logprobs"]["content"]]
        text = c["message"]["content"]
    else:
        lp = c["logprobs"]
        toks = list(zip(lp["token_ids"], lp["token_logprobs"], map(json.dumps, lp["top_logprobs"])))
        text = c["text"]
    return toks, text, c["finish_reason"], r["system_fingerprint"], r["seed"]


def test_64_seeded_requests_match_a_single_engine(replicas, server):
    reqs = [completion_request(i) for i in range(64)]
    with ThreadPoolExecutor(16) as pool:
        routed = list(pool.map(lambda pb: post(replicas.url, *pb), reqs))
        single = list(pool.map(lambda pb: post(server.base, *pb), reqs))
    served_by = set()
    for (path, _), a, b in zip(reqs, routed, single):
        assert a.status_code == 200, a.text
        assert b.status_code == 200, b.text
        ja, jb = a.json(), b.json()
        assert essentials(path, ja) == essentials(path, jb)
        assert ja["replica"] == a.headers["X-Detllm-Replica"]
        served_by.add(ja["replica"])
    assert served_by == {"r0", "r1"}, "least-loaded routing used one replica only"


def read_stream(resp, first_event=None):
    """Events of an SSE response; sets first_event once a token arrived."""
    events = []
    for line in resp.iter_lines():
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            events.append("[DONE]")
            break
        ev = json.loads(data)
        events.append(ev)
        if first_event is not None and ev.get("choices"):
            first_event.set()
    return events


def concat(events):
    """(token ids, logprobs, text, finish_reason, replicas) of a completions stream."""
    ids, lps, text, finish, reps = [], [], "", None, []
    for ev in events:
        if ev == "[DONE]" or "error" in ev:
            continue
        reps.append(ev.get("replica"))
        for c in ev["choices"]:
            text += c["text"]
            if c.get("logprobs"):
                ids += c["logprobs"]["token_ids"]
                lps += c["logprobs"]["token_logprobs"]
            finish = c["finish_reason"] or finish
    return ids, lps, text, finish, reps


def stream_body(i, deterministic=True):
    body = {"prompt": f"{PREFIX} a {['cat', 'dog', 'fox', 'owl'][i % 4]} number {i}",
            "max_tokens": 24, "temperature": 0.8, "seed": 77 + i, "stream": True,
            "ignore_eos": True}
    if i % 2 == 0:
        body["logprobs"] = 0  # the odd ones: the router asks for token ids itself
    if not deterministic:
        body["deterministic"] = False
        del body["seed"]
    return body


def test_killed_replica_streams_resume_with_the_same_tokens(replicas, server):
    router = replicas.router
    router.nondeterministic = "retry"
    n = 16
    firsts = [threading.Event() for _ in range(n + 1)]
    results = [None] * (n + 2)
    responses = [None] * (n + 1)

    def run(i):
        det = i < n
        r = post(replicas.url, "/v1/completions", stream_body(i, det), stream=True)
        responses[i] = r
        results[i] = read_stream(r, firsts[i])

    def run_whole():  # a non-deterministic whole request: retried from the start ('retry')
        body = {"prompt": f"{PREFIX} a whole story", "max_tokens": 40, "ignore_eos": True,
                "deterministic": False}
        results[n + 1] = post(replicas.url, "/v1/completions", body)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n + 1)]
    threads.append(threading.Thread(target=run_whole))
    for t in threads:
        t.start()
    for e in firsts:
        assert e.wait(300), "a stream produced no token"
    victims = {responses[i].headers["X-Detllm-Replica"] for i in range(n + 1)}
    assert len(victims) == 1, f"prefix affinity spread the streams over {victims}"
    victim = victims.pop()
    os.kill(replicas.pid(victim), signal.SIGKILL)
    for t in threads:
        t.join(300)

    with ThreadPoolExecutor(n) as pool:  # the uninterrupted runs, on the single engine
        refs = list(pool.map(lambda i: post(server.base, "/v1/completions", dict(
            stream_body(i), stream=False, logprobs=0)).json()["choices"][0], range(n)))
    for i, ref in enumerate(refs):
        ev = results[i]
        assert ev[-1] == "[DONE]", ev[-3:]
        assert not any("error" in e for e in ev if e != "[DONE]"), ev
        ids, lps, text, finish, reps = concat(ev)
        assert text == ref["text"]
        assert finish == ref["finish_reason"] == "length"
        if i % 2 == 0:
            assert ids == ref["logprobs"]["token_ids"]  # none repeated, none missing
            assert lps == ref["logprobs"]["token_logprobs"]  # the same floats
        else:
            assert ids == []  # the router's own logprobs were taken out
        assert reps[0] == victim and reps[-1] != victim, "no failover happened"
    # The non-deterministic stream had sent tokens: it ends with an error, nothing twice.
    ev = results[n]
    assert ev[-1] == "[DONE]"
    errors = [e for e in ev if e != "[DONE]" and "error" in e]
    assert len(errors) == 1 and errors[0]["error"]["code"] == "replica_failed"
    # The non-deterministic whole request was retried from the start on the other replica.
    whole = results[n + 1]
    assert whole.status_code == 200, whole.text
    assert whole.json()["replica"] != victim

    # The replica comes back (restarted on its node, on a new port) and is readmitted after
    # its fingerprint check.
    replicas.restart(victim)
    assert all(b["state"] == "up" for b in router.status()["replicas"])
    assert post(replicas.url, "/v1/completions", {"prompt": "x", "max_tokens": 1}).ok
    router.nondeterministic = "fail"


def test_nondeterministic_failure_is_an_error_when_configured(replicas):
    from detllm.ray import Router

    # A router whose only replica dies: nowhere to go, so even a retry fails cleanly.
    r = Router(api_key=API_KEY, nondeterministic="fail")
    info = replicas.infos["r1"]
    r.add_replica("only", info["url"])
    url = r.start()
    try:
        body = {"prompt": "Count:", "max_tokens": 4, "deterministic": False}
        ok = post(url, "/v1/completions", body)
        assert ok.status_code == 200 and ok.json()["replica"] == "only"
        r.backends["only"].port = 1  # a refused connection: the replica is gone
        bad = post(url, "/v1/completions", body)
        assert bad.status_code == 502
        assert bad.json()["error"]["code"] == "replica_failed"
        assert "non-deterministic" in bad.json()["error"]["message"]
    finally:
        r.stop()


def other_weights(tmp_path):
    """A copy of the default model with one float of blk.0.ffn_norm changed."""
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "other.gguf"
    shutil.copyfile(DEFAULT_MODEL, path)
    t = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "blk.0.ffn_norm.weight")
    with open(path, "r+b") as f:
        f.seek(t.data_offset)
        b = bytearray(f.read(4))
        b[0] ^= 1
        f.seek(t.data_offset)
        f.write(b)
    return str(path)


def test_replica_on_other_weights_is_refused_by_name(replicas, tmp_path):
    from detllm.ray import FingerprintMismatch, Router

    binary = find_binary()
    from detllm.ray.replica import ServeProcess

    proc = ServeProcess(binary, ["--model", other_weights(tmp_path), "--threads", "1"],
                        "127.0.0.1", API_KEY)
    proc.start()
    try:
        with pytest.raises(FingerprintMismatch) as e:
            replicas.router.add_replica("odd", proc.url)
        msg = str(e.value)
        assert "replica odd is refused" in msg
        assert e.value.replica == "odd"
        fields = [d[0] for d in e.value.differences]
        assert fields == ["weights"], msg  # the weights, and nothing else, differ
        assert "odd" not in replicas.router.status()["replicas"]
    finally:
        proc.stop()


def test_weight_update_under_load_has_one_version_per_response(replicas, tmp_path):
    from detllm.ray import LLMPool

    pool = LLMPool.from_replicas(replicas)
    old_fp = replicas.router.status()["fingerprint"]
    seen, stop = [], threading.Event()

    def load(k):
        i = 0
        while not stop.is_set():
            out = pool.generate([f"Load {k}.{i}:"], max_tokens=4, seed=i)[0]
            seen.append((out["weight_version"], out["fingerprint"], out["replica"]))
            i += 1

    threads = [threading.Thread(target=load, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    assert wait_until(lambda: len(seen) >= 4, 120)
    new_fp = pool.update_weights(other_weights(tmp_path), version="1")
    n_before = len(seen)
    assert wait_until(lambda: len(seen) >= n_before + 4, 120)
    stop.set()
    for t in threads:
        t.join(120)
    assert new_fp != old_fp
    # Every response names one version, and its fingerprint is that version's.
    assert {v for v, _, _ in seen} == {"0", "1"}
    for version, fp, _ in seen:
        assert fp == (old_fp if version == "0" else new_fp)
    # After the barrier every replica serves version 1 with one fingerprint.
    st = replicas.router.status()
    assert {(b["weight_version"], b["fingerprint"], b["state"]) for b in st["replicas"]} == \
        {("1", new_fp, "up")}
    after = pool.generate(["After the update:"], max_tokens=2, seed=3)[0]
    assert (after["weight_version"], after["fingerprint"]) == ("1", new_fp)


def test_more_replicas_than_the_local_cluster_holds_are_refused(replicas):
    # The module's local cluster has 4 CPUs: five one-CPU replicas could never all be placed,
    # so start() says so at once instead of waiting for placement.
    from detllm.ray import ReplicaSet

    rs = ReplicaSet(5, SERVE_ARGS, binary=find_binary(), api_key=API_KEY, num_cpus_per_replica=1)
    try:
        with pytest.raises(RuntimeError, match="5 replicas of 1 CPU each need 5 CPUs"):
            rs.start()
        assert not rs.actors
    finally:
        rs.shutdown()
