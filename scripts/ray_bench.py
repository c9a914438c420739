#!/usr/bin/env python3
"""Throughput of 1, 2, 4 detllm.ray replicas on one machine, and the router's added latency.

    PYTHONPATH=python .venv/bin/python scripts/ray_bench.py --binary build-cpu/detllm \
        --replicas 1 2 4 --threads 1 -c 32 -n 128 --max-tokens 16 --latency-requests 200

Throughput: n seeded completions (max_tokens each, ignore_eos) at concurrency c through the
router, in generated tokens/s. Latency: one-token requests sent one at a time, alternately to a
replica directly and through the router; p50/p99 of each and of their difference.
"""
import argparse
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
    a = ap.parse_args()
    from detllm.ray import ReplicaSet

    args = ["--threads", str(a.threads)] + (["--model", a.model] if a.model else [])
    for n in a.replicas:
        rs = ReplicaSet(n, args, binary=a.binary, num_cpus_per_replica=a.threads,
                        ray_num_cpus=max(os.cpu_count(), n * a.threads))
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
        if n == a.replicas[0] and a.latency_requests:
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
        rs.shutdown()
    import ray
    ray.shutdown()


if __name__ == "__main__":
    main()
