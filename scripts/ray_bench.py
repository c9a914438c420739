#!/usr/bin/env python3
"""Throughput of 1, 2, 4 detllm.ray replicas on one machine, the router's added latency, and
the time of an in-place weight update (LLMPool.update_weights) at each replica count.

    PYTHONPATH=python .venv/bin/python scripts/ray_bench.py --binary build-cpu/detllm \
        --replicas 1 2 4 --threads 1 --num-cpus-per-replica 0.5 -c 32 -n 128 --max-tokens 16 \
        --latency-requests 200 --update

Throughput: n seeded completions (max_tokens each, ignore_eos) at concurrency c through the
router, in generated tokens/s. Latency: one-token requests sent one at a time, alternately to a
replica directly and through the router; p50/p99 of each and of their difference (at every
replica count with --latency-all, else at the first). --num-cpus-per-replica is what each
replica reserves from Ray (fractional: more replicas than cores can be placed; they then share
the cores, which bounds the throughput). --update: the replicas run with --weight-transfer and
every parameter of the model is written in place (shm backend), median of 3 barriers.
"""
import argparse
import math
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def update_times(rs, n, model):
    """Median of 3 in-place updates of every parameter, with the model's own values (read with
    the compiled detllm package: LLM.named_parameters(), fp32), so the bits served do not
    change and only the barrier and the transfer are timed."""
    from detllm.ray import LLMPool

    try:
        import detllm
    except ImportError as e:
        print(f"replicas={n}: update not timed (the compiled detllm package is needed to read "
              f"the parameters: {e})")
        return
    llm = detllm.LLM(model=model)
    tensors = llm.named_parameters()
    del llm
    mib = sum(t.nbytes for t in tensors.values()) / 2**20
    pool = LLMPool.from_replicas(rs)
    times = []
    for k in range(3):
        t = time.perf_counter()
        pool.update_weights(tensors, version=f"bench-{k}")
        times.append(time.perf_counter() - t)
    print(f"replicas={n}: update_weights in place ({pool.last_update['backend']}), "
          f"{len(tensors)} tensors, {mib:.0f} MiB fp32: median {statistics.median(times)*1e3:.0f} ms, "
          f"all {', '.join(f'{x*1e3:.0f}' for x in times)} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", default=None)
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--threads", type=int, default=1, help="--threads of each replica")
    ap.add_argument("-c", type=int, default=32)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--latency-requests", type=int, default=200)
    ap.add_argument("--latency-all", action="store_true", help="latency at every replica count")
    ap.add_argument("--num-cpus-per-replica", type=float, default=None,
                    help="CPUs each replica reserves from Ray (default: --threads)")
    ap.add_argument("--update", action="store_true",
                    help="time LLMPool.update_weights in place (every parameter, shm)")
    a = ap.parse_args()
    from detllm.ray import LLMPool, ReplicaSet

    args = ["--threads", str(a.threads)] + (["--model", a.model] if a.model else [])
    if a.update:
        args.append("--weight-transfer")
    each = a.num_cpus_per_replica if a.num_cpus_per_replica is not None else a.threads
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    for n in a.replicas:
        rs = ReplicaSet(n, args, binary=a.binary, num_cpus_per_replica=each,
                        ray_num_cpus=max(os.cpu_count(), math.ceil(n * each)))
        url = rs.start()
        body = lambda i: {"prompt": f"Benchmark request {i}:", "max_tokens": a.max_tokens,
                          "temperature": 0.8, "seed": i, "ignore_eos": True}
        requests.post(url + "/v1/completions", json=body(0)).raise_for_status()  # warm
        t0 = time.time()
        with ThreadPoolExecutor(a.c) as ex:
            rs_ = list(ex.map(lambda i: requests.post(url + "/v1/completions", json=body(i)), range(a.n)))
        dt = time.time() - t0
        toks = sum(r.json()["usage"]["completion_tokens"] for r in rs_)
        print(f"replicas={n} threads/replica={a.threads}: {a.n} requests, {toks / dt:.1f} generated tok/s, {dt:.1f} s")
        if (n == a.replicas[0] or a.latency_all) and a.latency_requests:
            direct_url = rs.infos["r0"]["url"]
            d, r = [], []
            for i in range(a.latency_requests):
                b = {"prompt": "Hi", "max_tokens": 1, "seed": i}
                for target, out in ((direct_url, d), (url, r)):
                    t = time.perf_counter()
                    requests.post(target + "/v1/completions", json=b).raise_for_status()
                    out.append(time.perf_counter() - t)
            diff = [y - x for x, y in zip(d, r)]
            print(f"latency (ms) direct p50 {pct(d, 50)*1e3:.2f} p99 {pct(d, 99)*1e3:.2f}; "
                  f"router p50 {pct(r, 50)*1e3:.2f} p99 {pct(r, 99)*1e3:.2f}; "
                  f"added p50 {statistics.median(diff)*1e3:.2f} p99 {pct(diff, 99)*1e3:.2f}")
        if a.update:
            update_times(rs, n, a.model)
        rs.shutdown()
    import ray
    ray.shutdown()


if __name__ == "__main__":
    main()
