"""detllm.ray.LLMPool.update_weights in place (docs/ray.md, "LLMPool and weight updates"): two
`detllm serve --weight-transfer` replicas of the default model on a local Ray instance; the
weights go in through the weight-sync endpoints behind the router's version barrier.

- Under load (4 clients), an update from a safetensors directory (path backend): every
  response names one version and carries that version's fingerprint; after the barrier both
  replicas report the new version and one fingerprint; the processes are the same (no restart).
- A seeded replay on the updated pool equals, token ids and logprob bits, a fresh pool started
  on a GGUF file holding the new values.
- Tensors from memory (shm backend, the replicas being on this node) writing the old values
  back give the first outputs again, bit for bit.
- A tensor of the wrong shape is refused by every replica with nothing written anywhere; the
  pool keeps serving its version and the next update goes through.
- A replica killed after in-place updates (SIGKILL) and brought back by restart_replica: the
  updates are applied again in order (the path one by its path, the tensor one from the copy
  keep_updates made), it is admitted with the pool's fingerprint and, serving alone, gives the
  pool's outputs bit for bit. Without keep_updates the tensor update cannot be replayed: a
  clear refusal, and the replica is not admitted.

The weight changed is the final norm, which the default GGUF holds as F32 (so the same values
can be written into a GGUF copy for the fresh pool), as in test_weight_sync.py.
"""
import os
import shutil
import signal
import sys
import threading

import numpy as np
import pytest

from conftest import API_KEY, DEFAULT_MODEL, ROOT, find_binary, wait_until

sys.path.insert(0, os.path.join(ROOT, "python"))

ray = pytest.importorskip("ray")
gguf = pytest.importorskip("gguf")

SERVE_ARGS = ["--threads", "1", "--kv-cache-tokens", "4096", "--max-tokens-per-step", "256"]
PROMPTS = [f"Prompt {i}: the best way to learn is" for i in range(6)]
SAMPLING = dict(max_tokens=8, temperature=0.8, seed=11)
NORM_HF, NORM_GGUF = "model.norm.weight", "output_norm.weight"


def norm_tensor(path):
    for t in gguf.GGUFReader(path).tensors:
        if t.name == NORM_GGUF:
            return np.array(t.data, dtype=np.float32), int(t.data_offset)
    raise KeyError(NORM_GGUF)


def replay(pool):
    """Token ids and logprob bits of the seeded prompts (and the one version they name)."""
    outs = pool.generate(PROMPTS, **SAMPLING)
    versions = {o["weight_version"] for o in outs}
    assert len(versions) == 1, versions
    return [(o["token_ids"], np.array(o["logprobs"], np.float32).view(np.uint32).tolist())
            for o in outs], versions.pop()


def make_pool(n, model, **options):
    from detllm.ray import LLMPool

    return LLMPool(n, model=model, serve_args=SERVE_ARGS, binary=find_binary(), api_key=API_KEY,
                   ray_num_cpus=4, health_interval=0.2, **options)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if find_binary() is None or not os.path.exists(DEFAULT_MODEL):
        pytest.skip("needs the detllm binary and the default model")
    d = tmp_path_factory.mktemp("weights")
    norm, offset = norm_tensor(DEFAULT_MODEL)
    new = (norm * np.float32(1.25)).astype(np.float32)
    # The new weights as a checkpoint directory (path backend) and as a GGUF (the fresh pool).
    ckpt = d / "step1"
    ckpt.mkdir()
    from detllm.ray.weight_transfer import as_bytes, write_safetensors

    write_safetensors(str(ckpt / "model.safetensors"), [(NORM_HF, *as_bytes(NORM_HF, new))])
    new_gguf = d / "step1.gguf"
    shutil.copyfile(DEFAULT_MODEL, new_gguf)
    with open(new_gguf, "r+b") as f:
        f.seek(offset)
        f.write(new.tobytes())
    pool = make_pool(2, DEFAULT_MODEL)
    first, version = replay(pool)
    assert version == "0"
    yield dict(pool=pool, norm=norm, ckpt=str(ckpt), new_gguf=str(new_gguf), first=first)
    pool.shutdown()
    ray.shutdown()


def test_update_under_load_has_one_version_per_response(setup):
    pool = setup["pool"]
    rs = pool.replicas
    old_fp = rs.router.status()["fingerprint"]
    pids = {n: rs.pid(n) for n in rs.actors}
    seen, stop = [], threading.Event()

    def load(k):
        i = 0
        while not stop.is_set():
            out = pool.generate([f"Load {k}.{i}:"], max_tokens=4, seed=i)[0]
            seen.append((out["weight_version"], out["fingerprint"]))
            i += 1

    threads = [threading.Thread(target=load, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        assert wait_until(lambda: len(seen) >= 4, 120)
        new_fp = pool.update_weights(setup["ckpt"], version="1")
        n_before = len(seen)
        assert wait_until(lambda: len(seen) >= n_before + 4, 120)
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert pool.last_update["method"] == "in_place" and pool.last_update["backend"] == "path"
    assert new_fp != old_fp
    assert {v for v, _ in seen} == {"0", "1"}
    for version, fp in seen:
        assert fp == (old_fp if version == "0" else new_fp)
    st = rs.router.status()
    assert {(b["weight_version"], b["fingerprint"], b["state"]) for b in st["replicas"]} == \
        {("1", new_fp, "up")}
    assert st["fingerprint"] == new_fp
    # In place: the same processes, still running.
    assert {n: rs.pid(n) for n in rs.actors} == pids
    assert ray.get([a.poll.remote() for a in rs.actors.values()]) == [None, None]


def test_seeded_replay_equals_a_fresh_pool_on_the_new_weights(setup):
    updated, version = replay(setup["pool"])
    assert version == "1"
    assert updated != setup["first"]  # the update changed the outputs
    fresh = make_pool(1, setup["new_gguf"])
    try:
        on_file, _ = replay(fresh)
    finally:
        fresh.shutdown()
    assert updated == on_file


def test_tensors_over_shm_give_the_first_outputs_back(setup):
    pool = setup["pool"]
    fp = pool.update_weights({NORM_HF: setup["norm"]}, version="2")
    assert pool.last_update["method"] == "in_place" and pool.last_update["backend"] == "shm"
    outs, version = replay(pool)
    assert version == "2"
    assert outs == setup["first"]
    assert {b["fingerprint"] for b in pool.replicas.router.status()["replicas"]} == {fp}


def test_a_bad_tensor_writes_nothing_and_the_pool_goes_on(setup):
    from detllm.ray.weight_transfer import WeightTransferError

    pool = setup["pool"]
    fp = pool.replicas.router.status()["fingerprint"]
    with pytest.raises(WeightTransferError) as e:
        pool.update_weights({NORM_HF: np.zeros(7, np.float32)}, version="3")
    assert e.value.refused and set(e.value.answers) == {"r0", "r1"}
    assert "nothing was written" in str(e.value) and "shape" in str(e.value)
    outs, version = replay(pool)  # the router was resumed, on version 2's weights
    assert (outs, version) == (setup["first"], "2")
    assert pool.replicas.router.status()["fingerprint"] == fp
    # The sessions the refusal left open were closed: the next update goes through.
    pool.update_weights({NORM_HF: setup["norm"]}, version="3")
    assert replay(pool) == (setup["first"], "3")


def kill(pool, name):
    os.kill(pool.replicas.pid(name), signal.SIGKILL)
    assert wait_until(lambda: any(b["name"] == name and b["state"] == "down"
                                  for b in pool.replicas.router.status()["replicas"]), 60)


def test_a_replica_restarted_after_a_crash_gets_the_updates_again(setup):
    # The module's pool took version 2 and 3 as tensors it did not keep: r0 cannot be brought
    # back to version 3, and is not admitted on its file's weights.
    pool = setup["pool"]
    kill(pool, "r0")
    with pytest.raises(RuntimeError, match="keep_updates=True"):
        pool.restart_replica("r0")
    assert replay(pool) == (setup["first"], "3")  # r1 serves on

    kept = make_pool(2, DEFAULT_MODEL, keep_updates=True)
    try:
        kept.update_weights(setup["ckpt"], version="1")                           # path
        kept.update_weights({NORM_HF: setup["norm"] * np.float32(1.5)}, version="2")  # shm, kept
        before, version = replay(kept)
        assert version == "2" and before != setup["first"]
        fp = kept.replicas.router.status()["fingerprint"]
        pid = kept.replicas.pid("r0")
        kill(kept, "r0")
        info = kept.restart_replica("r0")
        assert info["weight_version"] == "2" and kept.replicas.pid("r0") != pid
        assert {(b["name"], b["state"], b["fingerprint"]) for b in
                kept.replicas.router.status()["replicas"]} == {("r0", "up", fp), ("r1", "up", fp)}
        kept.replicas.router.drain("r1", migrate=False)  # r0 alone serves the replay
        after, version = replay(kept)
        assert {o["replica"] for o in kept.generate(PROMPTS[:2], max_tokens=1)} == {"r0"}
        assert (after, version) == (before, "2")
    finally:
        kept.shutdown()
