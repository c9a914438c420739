"""`python -m detllm.ray`: N replicas on Ray behind one OpenAI endpoint, or a router alone.

    python -m detllm.ray serve --data-parallel 2 --binary build/detllm --port 8000 -- --threads 2
    python -m detllm.ray serve --data-parallel 4 --address auto --num-gpus-per-replica 1 -- --backend cuda
    python -m detllm.ray router --replica http://10.0.0.5:8000 --replica http://10.0.0.6:8000

Arguments after `--` go to every `detllm serve`.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading


def _router_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="the router's address (default %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="the router's port (0: any free one)")
    p.add_argument("--api-key", default=None,
                   help="key clients must send (Bearer); also the replicas' key")
    p.add_argument("--affinity-slack", type=int, default=4,
                   help="a request goes to the replica that served its prompt's prefix while "
                        "that replica has at most this many more requests in flight than the "
                        "least loaded (default %(default)s)")
    p.add_argument("--nondeterministic", choices=("fail", "retry"), default="fail",
                   help="a non-deterministic request whose replica fails: 'retry' re-runs it "
                        "from the start elsewhere when nothing of it was sent yet; 'fail' "
                        "answers an error (default). Deterministic requests always resume.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m detllm.ray", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="start replicas on Ray and the router")
    s.add_argument("--data-parallel", "-n", type=int, default=1, help="number of replicas")
    s.add_argument("--address", default=None,
                   help="Ray cluster to join ('auto': the one `ray start --head` runs here); "
                        "default: a local Ray instance")
    s.add_argument("--binary", default=None,
                   help="the detllm binary on every node (default: $DETLLM_BIN, else detllm on PATH)")
    s.add_argument("--num-cpus-per-replica", type=float, default=1)
    s.add_argument("--num-gpus-per-replica", type=float, default=0)
    s.add_argument("--replica-host", default=None,
                   help="address the replicas listen on (default: their node's IP)")
    _router_options(s)
    r = sub.add_parser("router", help="a router in front of running `detllm serve` replicas")
    r.add_argument("--replica", action="append", required=True, metavar="URL")
    _router_options(r)
    argv = list(sys.argv[1:] if argv is None else argv)
    serve_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, serve_args = argv[:i], argv[i + 1:]
    a = ap.parse_args(argv)
    options = dict(affinity_slack=a.affinity_slack, nondeterministic=a.nondeterministic)
    if a.cmd == "serve":
        from .cluster import ReplicaSet

        rs = ReplicaSet(a.data_parallel, serve_args, binary=a.binary, address=a.address,
                        num_cpus_per_replica=a.num_cpus_per_replica,
                        num_gpus_per_replica=a.num_gpus_per_replica, api_key=a.api_key,
                        host=a.host, port=a.port, replica_host=a.replica_host, **options)
        url = rs.start()
        stop = rs.shutdown
    else:
        from .router import Router

        router = Router(api_key=a.api_key, **options)
        for i, u in enumerate(a.replica):
            router.add_replica(f"r{i}", u)
        url = router.start(a.host, a.port)
        stop = router.stop
    print(f"detllm router: listening on {url}", file=sys.stderr, flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    stop()
    return 0
