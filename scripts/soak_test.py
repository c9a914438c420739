#!/usr/bin/env python3
"""Soak test of `detllm serve` (a program, not a CI test): mixed traffic with disconnects for
--duration seconds, sampling the server's RSS, file descriptors, open connections and KV
blocks, and replaying one seeded request throughout, whose token ids and logprobs must stay
bit-identical. Prints one line per sample and a verdict; exit 1 if a replay differed or a
resource did not come back to its level after the traffic stopped.

  scripts/soak_test.py --duration 1800            # the 30-minute soak of docs/server.md
  scripts/soak_test.py --duration 180 -c 16       # a short one

Starts build*/detllm serve itself (or --binary); loopback only; uses `requests`.
"""
import argparse
import glob
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPLAY = {"prompt": "Write a short poem about the sea.", "max_tokens": 24, "temperature": 0.8,
          "seed": 1234, "logprobs": 2}


def start(binary, extra):
    cmd = [binary, "serve", "--port", "0", "--threads", "2", *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True)
    for line in proc.stderr:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, int(m.group(1))
    sys.exit("detllm serve did not start")


def facts(proc, base):
    with open(f"/proc/{proc.pid}/status") as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
    m = {}
    for line in requests.get(base + "/metrics", timeout=30).text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    return {"rss_mib": rss / 1024, "fds": fds,
            "conns": m.get("detllm_http_connections", -1),
            "kv_used": m.get("detllm_kv_blocks_used", -1),
            "running": m.get("detllm_running_sequences", -1),
            "disconnects": m.get("detllm_client_disconnects_total", 0),
            "aborted": m.get("detllm_aborted_requests_total", 0)}


def replay(base):
    r = requests.post(base + "/v1/completions", json=REPLAY, timeout=300).json()
    lp = r["choices"][0]["logprobs"]
    return lp["token_ids"], lp["token_logprobs"]


def worker(base, port, stop, rng, stats):
    s = requests.Session()
    while not stop.is_set():
        kind = rng.random()
        body = {"prompt": f"Note {rng.randrange(10**6)}: " + "word " * rng.randrange(0, 40),
                "max_tokens": rng.randint(1, 48), "temperature": rng.choice([0, 0.7, 1.0]),
                "seed": rng.randrange(2**32)}
        try:
            if kind < 0.3:  # a streamed request abandoned after its first bytes
                c = socket.create_connection(("127.0.0.1", port), timeout=30)
                data = json.dumps({**body, "stream": True, "max_tokens": 200,
                                   "ignore_eos": True}).encode()
                c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                          b"application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
                c.recv(256)
                c.close()
                stats["abandoned"] += 1
            elif kind < 0.6:
                with s.post(base + "/v1/completions", json={**body, "stream": True},
                            stream=True, timeout=300) as r:
                    for _ in r.iter_lines():
                        pass
                stats["streamed"] += 1
            else:
                s.post(base + "/v1/completions", json=body, timeout=300).raise_for_status()
                stats["whole"] += 1
        except (OSError, requests.RequestException):
            stats["errors"] += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary")
    ap.add_argument("--duration", type=float, default=1800.0, help="seconds of traffic")
    ap.add_argument("-c", "--concurrency", type=int, default=16)
    ap.add_argument("--sample-every", type=float, default=30.0)
    ap.add_argument("--serve-arg", action="append", default=[])
    args = ap.parse_args()
    binary = args.binary or next(iter(sorted(glob.glob(os.path.join(ROOT, "build*", "detllm")))),
                                 None)
    proc, port = start(binary, args.serve_arg)
    base = f"http://127.0.0.1:{port}"
    ok = True
    try:
        ref = replay(base)
        first = facts(proc, base)
        print(f"{'t (s)':>7} {'RSS MiB':>8} {'fds':>5} {'conns':>6} {'KV used':>8} "
              f"{'running':>8} {'requests':>9} {'replay':>7}")
        stop = threading.Event()
        stats = {"abandoned": 0, "streamed": 0, "whole": 0, "errors": 0}
        threads = [threading.Thread(target=worker, args=(base, port, stop, random.Random(i), stats))
                   for i in range(args.concurrency)]
        t0 = time.time()
        for t in threads:
            t.start()
        while time.time() - t0 < args.duration:
            time.sleep(min(args.sample_every, max(0.0, args.duration - (time.time() - t0))))
            same = replay(base) == ref
            ok &= same
            f = facts(proc, base)
            n = stats["abandoned"] + stats["streamed"] + stats["whole"]
            print(f"{time.time() - t0:7.0f} {f['rss_mib']:8.1f} {f['fds']:5d} {f['conns']:6.0f} "
                  f"{f['kv_used']:8.0f} {f['running']:8.0f} {n:9d} {'same' if same else 'DIFF':>7}",
                  flush=True)
        stop.set()
        for t in threads:
            t.join(300)
        time.sleep(3)
        last = facts(proc, base)
        same = replay(base) == ref
        ok &= same
        print(f"traffic: {stats}")
        print(f"before: {first}")
        print(f"after:  {last}")
        flat = (last["kv_used"] <= first["kv_used"] and last["running"] == 0 and
                last["conns"] <= first["conns"] + 1 and last["fds"] <= first["fds"] + 2 and
                last["rss_mib"] <= first["rss_mib"] + 200)
        print(f"resources back to their level: {flat}; every replay identical: {ok}")
        ok &= flat
    finally:
        proc.terminate()
        proc.wait(60)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
