"""N replicas as Ray actors and the router in front of them.

    from detllm.ray import ReplicaSet
    rs = ReplicaSet(2, serve_args=["--threads", "2"], binary="build/detllm")
    url = rs.start()            # ray.init() (or address=...), the replicas, the router
    ...                         # OpenAI clients talk to url
    rs.shutdown()

Each replica is one actor (`Replica`, replica.py) reserving `num_cpus` cores (or `num_gpus`
GPUs) on whatever node Ray places it, owning one `detllm serve`. At start every replica
reports its fingerprint; one that differs from the first is refused by name with the fields
that differ (FingerprintMismatch), and nothing is started.
"""
from __future__ import annotations

import os
from typing import List, Optional

from .fingerprint import FingerprintMismatch, ReplicaIdentity, check_all_same
from .replica import Replica
from .router import Router


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def init_ray(address: Optional[str] = None, num_cpus: Optional[int] = None) -> None:
    """ray.init on `address` ("auto": the running cluster; None: a local one), once.

    The workers import detllm.ray from this checkout's python/ folder: it is put on their
    PYTHONPATH (the Python package need not be installed, nor its compiled module built)."""
    import ray

    if ray.is_initialized():
        return
    path = os.pathsep.join(p for p in (_package_root(), os.environ.get("PYTHONPATH")) if p)
    kwargs = dict(address=address, runtime_env={"env_vars": {"PYTHONPATH": path}},
                  include_dashboard=False, log_to_driver=False)
    if address is None and num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    ray.init(**kwargs)


class ReplicaSet:
    """Replicas (Ray actors) + the router; `start()` returns the router's URL."""

    def __init__(self, n: int, serve_args: Optional[List[str]] = None,
                 binary: Optional[str] = None, address: Optional[str] = None,
                 num_cpus_per_replica: float = 1, num_gpus_per_replica: float = 0,
                 api_key: Optional[str] = None, host: str = "127.0.0.1", port: int = 0,
                 replica_host: Optional[str] = None, weight_version: str = "0",
                 replica_serve_args: Optional[List[List[str]]] = None,
                 ray_num_cpus: Optional[int] = None, **router_options):
        if n < 1:
            raise ValueError("a ReplicaSet needs at least one replica")
        self.n = n
        self.serve_args = list(serve_args or [])
        # Per-replica extra options (tests: one replica on other weights); else the same.
        self.replica_serve_args = replica_serve_args or [[] for _ in range(n)]
        self.binary = os.path.abspath(binary) if binary and os.path.exists(binary) else binary
        self.address = address
        self.num_cpus = num_cpus_per_replica
        self.num_gpus = num_gpus_per_replica
        self.api_key = api_key
        self.host, self.port = host, port
        # Where the replicas listen: the actor's node address on a cluster, loopback alone.
        self.replica_host = replica_host
        self.weight_version = weight_version
        self.ray_num_cpus = ray_num_cpus
        self.router = Router(api_key=api_key, **router_options)
        self.actors = {}
        self.infos = {}

    def _actor_class(self):
        import ray

        return ray.remote(Replica)

    def start(self) -> str:
        import ray

        init_ray(self.address, self.ray_num_cpus)
        if self.address is None:  # a local cluster has fixed resources: refuse what cannot fit
            total = ray.cluster_resources()
            for what, each in (("CPU", self.num_cpus), ("GPU", self.num_gpus)):
                need, have = self.n * each, total.get(what, 0)
                if need > have:
                    raise RuntimeError(
                        f"{self.n} replicas of {each:g} {what} each need {need:g} {what}s; this "
                        f"machine's Ray cluster has {have:g}: start fewer replicas, lower "
                        f"num_{what.lower()}s_per_replica, or join a larger cluster (address=)")
        cls = self._actor_class()
        names = [f"r{i}" for i in range(self.n)]
        for i, name in enumerate(names):
            self.actors[name] = cls.options(
                num_cpus=self.num_cpus, num_gpus=self.num_gpus, name=None,
                max_restarts=0).remote(name, self.serve_args + self.replica_serve_args[i],
                                       self.binary, self.replica_host, self.api_key,
                                       self.weight_version)
        try:
            infos = ray.get([self.actors[n].start.remote() for n in names])
            self.infos = {info["name"]: info for info in infos}
            check_all_same([(i["name"], ReplicaIdentity(**i["identity"])) for i in infos])
            for info in infos:
                self.router.add_replica(info["name"], info["url"], info["weight_version"],
                                        ReplicaIdentity(**info["identity"]))
        except BaseException:
            self.shutdown()
            raise
        return self.router.start(self.host, self.port)

    @property
    def url(self) -> str:
        return self.router.url

    def pid(self, name: str) -> int:
        """The `detllm serve` process id of a replica (to kill it: a real crash)."""
        return self.infos[name]["pid"]

    def replica_log(self, name: str) -> str:
        import ray

        return ray.get(self.actors[name].log.remote())

    def restart(self, name: str, serve_args: Optional[List[str]] = None,
                weight_version: Optional[str] = None) -> dict:
        """Restarts one replica's process (after a crash, or on new weights)."""
        import ray

        args = None if serve_args is None else self.serve_args + serve_args
        info = ray.get(self.actors[name].restart.remote(args, weight_version))
        self.infos[name] = info
        self.router.update_replica(name, info["url"], info["weight_version"],
                                   ReplicaIdentity(**info["identity"]))
        return info

    def shutdown(self) -> None:
        import ray

        self.router.stop()
        if self.actors:
            try:
                ray.get([a.stop.remote() for a in self.actors.values()], timeout=120)
            except Exception:  # noqa: BLE001  (a dead actor: nothing left to stop)
                pass
            for a in self.actors.values():
                ray.kill(a)
        self.actors = {}


__all__ = ["ReplicaSet", "FingerprintMismatch", "init_ray"]
