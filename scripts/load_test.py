#!/usr/bin/env python3
"""A bounded load test of `detllm serve` on loopback: C concurrent clients send N requests in
total (mixed completions / chat, streaming or not, varied prompts and sampling) and the
program reports throughput (requests/s, generated tokens/s) and latency percentiles (end to
end, and time to first token for streamed requests). A program, not a test: it prints numbers.

  scripts/load_test.py                            # starts build*/detllm serve itself
  scripts/load_test.py --url http://127.0.0.1:8000 --api-key KEY -c 32 -n 256
  scripts/load_test.py --kind tokenize -c 32 -n 4000      # small requests: the HTTP layer alone
  scripts/load_test.py --kind stream -c 256 -n 256        # 256 concurrent SSE streams
  scripts/load_test.py --compare OLD/detllm NEW/detllm --rounds 5 --kind tokenize -c 32 -n 3000

--compare A B: the same load against a fresh server of each binary, interleaved over --rounds
(A B, then B A, ...: drift of a shared machine's load falls on both), then each one's median
and the ratio B/A of the medians with the spread of the per-round ratios.

--kind mixed (default): completions and chat, half streamed; tokenize: POST /tokenize of a
short prompt (no engine work: measures parsing, routing and connections); stream: every
request a streamed completion.

Uses only the standard library and `requests` (in the project venv).
"""
import argparse
import glob
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPICS = ["the sea", "a robot", "winter", "prime numbers", "maps", "coffee", "the moon",
          "keys", "bicycles", "cities", "dragons", "music", "gardens", "trains"]


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def start_server(args, binary=None):
    binary = binary or args.binary or next(
        iter(sorted(glob.glob(os.path.join(ROOT, "build*", "detllm")))), None)
    if not binary:
        sys.exit("no detllm binary found: build it or pass --binary / --url")
    cmd = [binary, "serve", "--port", "0", "--threads", str(args.threads), *args.serve_arg]
    if args.api_key:
        cmd += ["--api-key", args.api_key]
    # A session of its own: with autogroup scheduling (Linux's default) the server then gets its
    # own share of a shared machine instead of splitting this client's.
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("detllm serve did not start")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc, f"http://127.0.0.1:{port}"


def make_request(i, rng, max_tokens, kind="mixed"):
    topic = rng.choice(TOPICS)
    if kind == "tokenize":
        return "/tokenize", {"prompt": f"A note on {topic}", "stream": False}
    sampling = {"max_tokens": rng.randint(max(1, max_tokens // 2), max_tokens),
                "temperature": rng.choice([0.0, 0.7, 1.0]), "seed": rng.randrange(2**32),
                "stream": rng.random() < 0.5, "model": "default"}
    if kind == "stream":
        sampling["stream"] = True
    if i % 3 == 0 and kind == "mixed":
        return "/v1/chat/completions", {
            "messages": [{"role": "user", "content": f"Tell me about {topic}."}], **sampling}
    words = " ".join(rng.choice(TOPICS) for _ in range(rng.randint(0, 20)))
    return "/v1/completions", {"prompt": f"A note on {topic}: {words}", **sampling}


def one(session, base, headers, path, body):
    """One request; returns ok, end-to-end latency and (streamed) time to first text."""
    t0 = time.perf_counter()
    ttft = None
    body = dict(body)
    stream = body["stream"]
    if path == "/tokenize":
        del body["stream"]
    with session.post(base + path, json=body, headers=headers, stream=stream,
                      timeout=600) as r:
        if r.status_code != 200:
            return {"ok": False, "status": r.status_code, "latency": time.perf_counter() - t0}
        if stream:
            for line in r.iter_lines():
                if ttft is None and line.startswith(b"data: {"):
                    chunk = json.loads(line[6:])
                    ch = chunk["choices"][0] if chunk["choices"] else {}
                    if ch.get("text") or (ch.get("delta") or {}).get("content"):
                        ttft = time.perf_counter() - t0
        else:
            r.content  # noqa: B018 - read the whole body
    return {"ok": True, "latency": time.perf_counter() - t0, "ttft": ttft}


def cpu_seconds(pid):
    """User + system CPU time of a process (all its threads) so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_load(args, base, headers, proc=None):
    """Runs the load once against `base`; returns the figures as a dict (with the server's
    CPU seconds over the run when `proc`, the server started here, is given)."""
    rng = random.Random(args.seed)
    work = [make_request(i, rng, args.max_tokens, args.kind) for i in range(args.requests)]
    metrics_before = requests.get(base + "/metrics", headers=headers, timeout=30).text
    local = threading.local()

    def task(item):
        if not hasattr(local, "s"):
            local.s = requests.Session()
        return one(local.s, base, headers, *item)

    cpu0 = cpu_seconds(proc.pid) if proc else None
    client0 = sum(os.times()[:2])
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        results = list(pool.map(task, work))
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(proc.pid) - cpu0 if proc else None
    client_cpu = sum(os.times()[:2]) - client0
    metrics_after = requests.get(base + "/metrics", headers=headers, timeout=30).text

    def counter(text, name):
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    generated = counter(metrics_after, "detllm_generation_tokens_total") - \
        counter(metrics_before, "detllm_generation_tokens_total")
    ok = [r for r in results if r["ok"]]
    return {"n": len(results), "ok": len(ok), "wall": wall, "req_s": len(ok) / wall,
            "tok_s": generated / wall, "generated": generated, "cpu_s": cpu, "client_cpu_s": client_cpu,
            "lat": [r["latency"] for r in ok],
            "ttft": [r["ttft"] for r in ok if r.get("ttft") is not None]}


def compare(args, headers):
    """--compare A B: interleaved rounds, medians, the ratio B/A and its spread."""
    a, b = args.compare
    figures = {a: [], b: []}
    cpu = {a: [], b: []}  # the server's CPU seconds per run: the same work, so a cost
    key = "req_s" if args.kind == "tokenize" else "tok_s"
    unit = "req/s" if key == "req_s" else "generated tok/s"
    for rnd in range(args.rounds):
        order = (a, b) if rnd % 2 == 0 else (b, a)
        for binary in order:
            proc, base = start_server(args, binary)
            try:
                r = run_load(args, base, headers, proc)
            finally:
                proc.terminate()
                proc.wait(60)
            figures[binary].append(r[key])
            cpu[binary].append(r["cpu_s"])
            load = os.getloadavg()[0]
            print(f"round {rnd + 1} {'A' if binary == a else 'B'}: {r[key]:.2f} {unit} "
                  f"({r['ok']}/{r['n']} ok, wall {r['wall']:.2f} s, server CPU {r['cpu_s']:.2f} s "
                  f"= {r['cpu_s'] / r['wall']:.2f} cores, client CPU {r['client_cpu_s']:.2f} s, "
                  f"load {load:.1f})", flush=True)
            if r["ok"] != r["n"]:
                return 1
    ma, mb = statistics.median(figures[a]), statistics.median(figures[b])
    ratios = [y / x for x, y in zip(figures[a], figures[b])]
    print(f"A {a}: median {ma:.2f} {unit} (min {min(figures[a]):.2f}, max {max(figures[a]):.2f})")
    print(f"B {b}: median {mb:.2f} {unit} (min {min(figures[b]):.2f}, max {max(figures[b]):.2f})")
    print(f"B/A: {mb / ma:.3f} (ratio of medians); per-round ratios "
          f"{', '.join(f'{x:.3f}' for x in ratios)}; median {statistics.median(ratios):.3f}, "
          f"min {min(ratios):.3f}, max {max(ratios):.3f}")
    ca, cb = statistics.median(cpu[a]), statistics.median(cpu[b])
    print(f"server CPU seconds for the same work: A median {ca:.2f} "
          f"({', '.join(f'{x:.2f}' for x in cpu[a])}), B median {cb:.2f} "
          f"({', '.join(f'{x:.2f}' for x in cpu[b])}); B/A {cb / ca:.3f}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", help="a running server (default: start build*/detllm serve)")
    ap.add_argument("--binary", help="the detllm binary to start")
    ap.add_argument("--api-key", default="")
    ap.add_argument("-c", "--concurrency", type=int, default=16)
    ap.add_argument("-n", "--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2,
                    help="engine threads of a server started here")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kind", choices=["mixed", "tokenize", "stream"], default="mixed")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="an extra option for the server started here (repeat: --serve-arg=--x "
                         "--serve-arg=1)")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"),
                    help="two detllm binaries: the same load on each, interleaved over --rounds")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of --compare")
    args = ap.parse_args()
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    if args.compare:
        if args.url:
            sys.exit("--compare starts its own servers: leave out --url")
        return compare(args, headers)

    proc = None
    base = args.url
    if not base:
        proc, base = start_server(args)
    try:
        r = run_load(args, base, headers, proc)
    finally:
        if proc:
            proc.terminate()
            proc.wait(60)
    lat, ttft, wall, generated = r["lat"], r["ttft"], r["wall"], r["generated"]
    print(f"requests ({args.kind}): {r['n']} ({r['ok']} ok, {r['n'] - r['ok']} failed), "
          f"concurrency {args.concurrency}, wall {wall:.2f} s")
    print(f"throughput: {r['req_s']:.2f} req/s, {r['tok_s']:.1f} generated tok/s "
          f"({int(generated)} tokens, from /metrics)")
    if r["cpu_s"] is not None:
        print(f"server CPU: {r['cpu_s']:.2f} s ({r['cpu_s'] / wall:.2f} cores)")
    if lat:
        print(f"latency (s): p50 {percentile(lat, 50):.3f}  p90 {percentile(lat, 90):.3f}  "
              f"p99 {percentile(lat, 99):.3f}  max {max(lat):.3f}  mean {statistics.mean(lat):.3f}")
    if ttft:
        print(f"time to first token, streamed (s): p50 {percentile(ttft, 50):.3f}  "
              f"p99 {percentile(ttft, 99):.3f}")
    return 0 if r["ok"] == r["n"] else 1


if __name__ == "__main__":
    sys.exit(main())
