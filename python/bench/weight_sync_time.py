"""Cost of one full weight sync of a model, every parameter, as an RL trainer does after a step:

  1. in process: ``llm.update_weights`` of every parameter from numpy fp32 (the path of the
     colocated adapters: TRL's rollout_func, verl's DetllmRollout.update_weights);
  2. to a server: ``detllm serve --weight-transfer`` over its shm backend (one POSIX
     shared-memory object per tensor, written by this process; then /start_weight_update,
     /update_weights, /finish_weight_update over HTTP), the trainer's writes timed apart.

Median of --repeat syncs each, with fresh values every time (the weights times 1 + 2^-k, so
each sync really changes them). Prints milliseconds and GB/s (fp32 bytes).

  PYTHONPATH=python:DIR/python DETLLM_BIN=DIR/detllm .venv/bin/python python/bench/weight_sync_time.py \
      [--model PATH] [--repeat 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np

import detllm
import detllm.llm  # default_model_path (detllm imports its modules on first use)

ROOT = Path(__file__).resolve().parents[2]


def e2e_conftest():
    spec = importlib.util.spec_from_file_location("e2e_conftest", ROOT / "tests" / "e2e" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-server", action="store_true")
    a = ap.parse_args()
    model = a.model or detllm.llm.default_model_path()
    llm = detllm.LLM(model=model, threads=a.threads)
    base = llm.named_parameters()
    nbytes = sum(v.nbytes for v in base.values())
    print(f"model {model}: {len(base)} tensors, {nbytes / 2**20:.0f} MiB fp32", flush=True)

    def values(k):
        f = np.float32(1 + 2.0 ** -(k + 8))
        return {n: v * f for n, v in base.items()}

    times = []
    for k in range(a.repeat):
        vals = values(k)
        t0 = time.perf_counter()
        llm.update_weights(vals, version=f"bench-{k}")
        times.append(time.perf_counter() - t0)
    m = statistics.median(times)
    print(f"in process, llm.update_weights of every tensor: median {m * 1e3:.0f} ms "
          f"({nbytes / m / 1e9:.2f} GB/s); runs {', '.join(f'{t * 1e3:.0f}' for t in times)} ms", flush=True)
    del llm
    if a.no_server:
        return 0

    conf = e2e_conftest()
    s = conf.start_server("--weight-transfer", "--model", model, "--threads", str(a.threads))
    try:
        r = s.post("/init_weight_transfer_engine", {"init_info": {"backend": "shm"}})
        assert r.status_code == 200, r.text
        writes, syncs = [], []
        for k in range(a.repeat):
            vals = values(k)
            t0 = time.perf_counter()
            shms = []
            for n, v in vals.items():
                sh = shared_memory.SharedMemory(create=True, size=v.nbytes)
                np.ndarray(v.shape, np.float32, sh.buf)[:] = v
                shms.append(sh)
            t1 = time.perf_counter()
            info = {"names": list(vals), "dtype_names": ["float32"] * len(vals),
                    "shapes": [list(v.shape) for v in vals.values()],
                    "shm_names": ["/" + sh.name.lstrip("/") for sh in shms]}
            for path, body in [("/start_weight_update", {"is_checkpoint_format": True}),
                               ("/update_weights", {"update_info": info}),
                               ("/finish_weight_update", {"weight_version": f"bench-{k}"})]:
                r = s.post(path, body, timeout=600)
                assert r.status_code == 200, (path, r.text)
            t2 = time.perf_counter()
            for sh in shms:
                sh.close()
                sh.unlink()
            writes.append(t1 - t0)
            syncs.append(t2 - t1)
        w, y = statistics.median(writes), statistics.median(syncs)
        print(f"server, shm backend: trainer writes {w * 1e3:.0f} ms, start+update+finish {y * 1e3:.0f} ms "
              f"({nbytes / y / 1e9:.2f} GB/s), total {(w + y) * 1e3:.0f} ms (medians of {a.repeat}; "
              f"sync runs {', '.join(f'{t * 1e3:.0f}' for t in syncs)} ms)", flush=True)
    finally:
        assert s.stop() == 0, "".join(s.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
