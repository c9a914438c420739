"""detllm on Ray: data-parallel replicas behind one OpenAI endpoint (docs/ray.md).

- ReplicaSet: N `detllm serve` replicas as Ray actors (one node or a cluster), refused when
  their numerics fingerprints differ, and the router in front of them.
- Router: the HTTP front (least-loaded routing with prefix affinity, health, draining,
  failover that resumes a deterministic stream with the same tokens); usable without Ray on
  replicas given by URL.
- LLMPool: generate / score / chat spread over the replicas, and update_weights behind a
  version barrier.

`python -m detllm.ray` is the command line (`--help`).
"""
from .cluster import ReplicaSet, init_ray
from .fingerprint import FingerprintMismatch, ReplicaIdentity, fetch_identity
from .pool import LLMPool
from .router import Router

__all__ = ["ReplicaSet", "LLMPool", "Router", "FingerprintMismatch", "ReplicaIdentity", "fetch_identity",
           "init_ray"]
