"""vLLM's RL control plane on `detllm serve` (docs/server.md, "Weight updates from a trainer"):
/pause (abort, wait, keep), /resume, /is_paused, /get_world_size and the weight-transfer
protocol (/init_weight_transfer_engine, /start_weight_update, /update_weights,
/finish_weight_update) with the path (safetensors) and shm (POSIX shared memory) backends.

The weights changed are final-norm / layer-norm vectors, which the default model's GGUF holds
as F32: the same values can then be written into a copy of the GGUF, and a server started on
that copy is the "fresh server on the new weights" a replay must equal bit for bit.
"""
import json
import shutil
import struct
import threading
import time
from multiprocessing import shared_memory

import numpy as np
import pytest

from conftest import DEFAULT_MODEL, start_server

gguf = pytest.importorskip("gguf")

PROMPT = "The three primary colors are"
REQ = {"model": "default", "prompt": PROMPT, "max_tokens": 12, "temperature": 0.8, "seed": 7,
       "logprobs": 1}
NORM_HF, NORM_GGUF = "model.norm.weight", "output_norm.weight"


def gguf_tensor(name):
    for t in gguf.GGUFReader(DEFAULT_MODEL).tensors:
        if t.name == name:
            return np.array(t.data, dtype=np.float32), int(t.data_offset)
    raise KeyError(name)


def write_safetensors(path, tensors):
    """A minimal safetensors file (8-byte header length, JSON header, raw little-endian data)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def outputs(r):
    """Token ids (as the logprob tokens) and logprob bits of a /v1/completions response."""
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    return lp["tokens"], np.array(lp["token_logprobs"], dtype=np.float32).view(np.uint32).tolist()


def update(s, update_info, version, backend):
    for path, body in [("/init_weight_transfer_engine", {"init_info": {"backend": backend}}),
                       ("/start_weight_update", {"is_checkpoint_format": True}),
                       ("/update_weights", {"update_info": update_info}),
                       ("/finish_weight_update", {"weight_version": version})]:
        r = s.post(path, body)
        assert r.status_code == 200, (path, r.text)
    return r.json()


@pytest.fixture(scope="module")
def norm():
    return gguf_tensor(NORM_GGUF)


@pytest.fixture(scope="module")
def ws():
    s = start_server("--weight-transfer")
    yield s
    assert s.stop() == 0, "".join(s.log)


def test_world_size_and_pause_state(ws):
    assert ws.get("/get_world_size").json() == {"world_size": 1}
    assert ws.get("/is_paused").json() == {"is_paused": False}
    r = ws.post("/pause?mode=sometimes")
    assert r.status_code == 400 and "abort" in r.json()["error"]["message"]
    assert ws.get("/is_paused").json() == {"is_paused": False}


def test_pause_wait_holds_new_requests_and_abort_ends_them(ws):
    ref = outputs(ws.post("/v1/completions", REQ))
    long_req = dict(REQ, max_tokens=24, seed=11)
    results = {}

    def run(key, body):
        results[key] = ws.post("/v1/completions", body)

    # wait: the request in flight finishes; one sent while paused waits for /resume.
    t = threading.Thread(target=run, args=("inflight", long_req))
    t.start()
    time.sleep(0.3)
    assert ws.post("/pause?mode=wait").json() == {"status": "paused", "mode": "wait"}
    t.join(60)  # answered once the engine finished it (its HTTP reply may trail /pause's)
    assert results["inflight"].json()["choices"][0]["finish_reason"] == "length"
    assert ws.get("/is_paused").json() == {"is_paused": True}
    held = threading.Thread(target=run, args=("held", REQ))
    held.start()
    time.sleep(1.0)
    assert "held" not in results, "a request ran while the server was paused"
    assert ws.post("/resume").json() == {"status": "resumed"}
    held.join(60)
    assert outputs(results["held"]) == ref

    # keep (the request stays where it is, and goes on after /resume unchanged) is checked
    # in-process, step by step: tests/server/weight_sync_test.cpp.

    # abort: the request in flight ends with finish_reason "abort".
    t = threading.Thread(target=run, args=("aborted", dict(long_req, max_tokens=400)))
    t.start()
    time.sleep(1.0)
    assert ws.post("/pause", params=None).json()["mode"] == "abort"
    t.join(60)
    assert results["aborted"].json()["choices"][0]["finish_reason"] == "abort"
    ws.post("/resume")


def test_update_replays_as_a_fresh_server_on_the_new_weights(ws, norm, tmp_path):
    before = ws.post("/v1/completions", REQ)
    assert before.headers["X-Detllm-Weight-Version"] == "initial"
    values, offset = norm
    new = (values * np.float32(1.25)).astype(np.float32)
    write_safetensors(tmp_path / "model.safetensors", {NORM_HF: ("F32", new)})
    done = update(ws, {"path": str(tmp_path)}, "step-1", "path")
    assert done["weight_version"] == "step-1" and done["updated"] == 1
    after = ws.post("/v1/completions", REQ)
    assert after.headers["X-Detllm-Weight-Version"] == "step-1"
    assert after.json()["system_fingerprint"] == done["system_fingerprint"]
    assert after.json()["system_fingerprint"] != before.json()["system_fingerprint"]
    assert outputs(after) != outputs(before), "the update changed nothing"

    # A server started on a GGUF holding the same new values (its blocks not widened).
    model = tmp_path / "updated.gguf"
    shutil.copyfile(DEFAULT_MODEL, model)
    with open(model, "r+b") as f:
        f.seek(offset)
        f.write(new.tobytes())
    fresh = start_server("--model", str(model))
    try:
        assert outputs(fresh.post("/v1/completions", REQ)) == outputs(after)
    finally:
        fresh.stop()

    # The shm backend, bf16 ... no: the original float32 values back, from shared memory: the
    # outputs are the first server's again, bit for bit.
    shm = shared_memory.SharedMemory(create=True, size=values.nbytes)
    try:
        np.ndarray(values.shape, np.float32, shm.buf)[:] = values
        info = {"names": [NORM_HF], "dtype_names": ["float32"], "shapes": [list(values.shape)],
                "shm_names": ["/" + shm.name.lstrip("/")]}
        assert update(ws, info, "step-2", "shm")["weight_version"] == "step-2"
    finally:
        shm.close()
        shm.unlink()
    again = ws.post("/v1/completions", REQ)
    assert again.headers["X-Detllm-Weight-Version"] == "step-2"
    assert outputs(again) == outputs(before)


def test_concurrent_load_sees_one_version_per_response(ws, norm, tmp_path):
    values, _ = norm
    states = {"A": values, "B": (values * np.float32(0.8)).astype(np.float32)}
    files = {}
    for k, v in states.items():
        d = tmp_path / k
        d.mkdir()
        write_safetensors(d / "model.safetensors", {NORM_HF: ("F32", v)})
        files[k] = str(d)
    req = dict(REQ, max_tokens=8)
    ref = {}
    for k in ("B", "A"):  # each state's outputs, alone
        update(ws, {"path": files[k]}, f"ref-{k}", "path")
        ref[k] = outputs(ws.post("/v1/completions", req))
    assert ref["A"] != ref["B"]
    got, stop = [], threading.Event()

    def load():
        while not stop.is_set():
            r = ws.post("/v1/completions", req)
            got.append((r.headers.get("X-Detllm-Weight-Version"), outputs(r)))

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    versions = {"ref-A": "A"}
    for i, k in enumerate(["B", "A", "B"]):
        time.sleep(0.3)
        v = f"load-{i}-{k}"
        update(ws, {"path": files[k]}, v, "path")  # no /pause: finish waits for the engine
        versions[v] = k
    time.sleep(0.4)
    stop.set()
    for t in threads:
        t.join(60)
    seen = {v for v, _ in got}
    assert len(seen) >= 3, f"the load did not span the updates: {seen}"
    for v, out in got:
        assert v in versions, f"unknown weight version {v!r}"
        assert out == ref[versions[v]], f"a response of version {v} is not that version's output"


def test_bad_updates_are_refused_and_the_server_keeps_serving(ws, norm, tmp_path):
    values, _ = norm
    ref = outputs(ws.post("/v1/completions", REQ))
    version = ws.post("/v1/completions", REQ).headers["X-Detllm-Weight-Version"]
    assert ws.post("/update_weights", {"update_info": {"path": str(tmp_path)}}).status_code in (400, 409)

    def refused(path, body, status, *words):
        r = ws.post(path, body) if not isinstance(body, str) else ws.post(
            path, data=body, headers={"Content-Type": "application/json"})
        assert r.status_code == status, (path, body, r.text)
        msg = r.json()["error"]["message"]
        for w in words:
            assert w in msg, (w, msg)

    refused("/init_weight_transfer_engine", {"init_info": {}}, 400, "backend")
    refused("/init_weight_transfer_engine", {"init_info": {"backend": "ipc"}}, 400, "not supported")
    # nccl: without its rendezvous fields (a build with NCCL), or refused by name (without).
    r = ws.post("/init_weight_transfer_engine", {"init_info": {"backend": "nccl"}})
    assert r.status_code == 400, r.text
    assert any(w in r.json()["error"]["message"] for w in ("rank_offset", "built with NCCL")), r.text
    # TRL's init_info with a world size this one-process server cannot be part of.
    refused("/init_weight_transfer_engine", {"init_info": {
        "master_address": "127.0.0.1", "master_port": 1, "rank_offset": 1, "world_size": 3,
        "packed": True}}, 400, "world_size")
    info = ws.get("/server_info?config_format=json").json()["vllm_config"]["weight_transfer_config"]
    assert {"path", "shm"} <= set(info["backends"]), info
    refused("/init_weight_transfer_engine", "{not json", 400)
    assert ws.post("/init_weight_transfer_engine", {"init_info": {"backend": "path"}}).status_code == 200
    refused("/start_weight_update", {"is_checkpoint_format": False}, 400, "is_checkpoint_format")
    assert ws.post("/start_weight_update").status_code == 200
    refused("/start_weight_update", None, 409, "already")
    bad = tmp_path / "bad"
    bad.mkdir()
    write_safetensors(bad / "model.safetensors", {
        "model.layers.0.mlp.nonexistent.weight": ("F32", np.zeros(4, np.float32)),
        NORM_HF: ("F32", np.zeros(7, np.float32)),
        "model.layers.1.input_layernorm.weight": ("F64", np.zeros(values.shape, np.float64)),
    })
    refused("/update_weights", {"update_info": {"path": str(bad)}}, 400,
            "model.layers.0.mlp.nonexistent.weight", "not a parameter", NORM_HF, "shape [7]",
            "float64")
    refused("/update_weights", {"update_info": {"path": str(tmp_path / "missing")}}, 400)
    refused("/update_weights", {"update_info": {"path": str(bad), "names": ["model.x"]}}, 400, "model.x")
    refused("/update_weights", {"update_info": {"path": str(bad), "colour": 1}}, 400, "colour")
    refused("/update_weights", {"names": []}, 400, "update_info")
    # Nothing was staged or written: finishing changes the version only.
    done = ws.post("/finish_weight_update", {"weight_version": "noop"}).json()
    assert done["updated"] == 0
    r = ws.post("/v1/completions", REQ)
    assert r.headers["X-Detllm-Weight-Version"] == "noop" != version
    assert outputs(r) == ref
    refused("/finish_weight_update", {}, 409, "start_weight_update")


def test_weight_endpoints_need_the_flag(server):
    r = server.post("/init_weight_transfer_engine", {"init_info": {"backend": "path"}})
    assert r.status_code == 400 and "--weight-transfer" in r.json()["error"]["message"]
    assert server.get("/is_paused").json() == {"is_paused": False}
