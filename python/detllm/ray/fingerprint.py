"""What a replica is, numerically, and the refusal of one that differs from the others.

A replica's numerics are its `system_fingerprint` (GET /v1/models): a hash of the weights, the
engine version and numerics revision, the backend and its build, the C library and the mode
(src/determinism/fingerprint.h). The server also publishes the hashed fields by name
(`fingerprint_fields`), so a refusal can say *which* of them differ, not only that two hashes do.
Replicas with one fingerprint give the same bits for a deterministic request; that is what lets
the router send a request to any of them and resume a stream on another.
"""
from __future__ import annotations

import dataclasses
import json
import urllib.request
from typing import Dict, List, Optional, Sequence, Tuple


class FingerprintMismatch(RuntimeError):
    """A replica's numerics differ from the pool's: it is refused (the message names the fields)."""

    def __init__(self, message: str, replica: str, differences: List[Tuple[str, str, str]]):
        super().__init__(message)
        self.replica = replica
        self.differences = differences  # (field, the pool's value, the replica's value)


@dataclasses.dataclass
class ReplicaIdentity:
    """What GET /v1/models (and its headers) says about one `detllm serve`."""

    fingerprint: str
    fields: Dict[str, str]  # fingerprint_fields; {} from a server that does not publish them
    model: str
    version: str  # X-Detllm-Version
    backend: str  # X-Detllm-Backend
    policy: str  # X-Detllm-Determinism
    max_model_len: int

    @property
    def deterministic_by_default(self) -> bool:
        # DeterminismPolicy::describe(): "det=…;other=…;default=det|nondet;…"
        parts = dict(p.split("=", 1) for p in self.policy.split(";") if "=" in p)
        return parts.get("default", "det") == "det"

    def comparable(self) -> Dict[str, str]:
        """The fields two replicas must share: the hashed ones, else what the headers say."""
        if self.fields:
            return dict(self.fields)
        return {"detllm": self.version, "backend": self.backend, "model": self.model}


def fetch_identity(base_url: str, api_key: Optional[str] = None,
                   timeout: float = 30.0) -> ReplicaIdentity:
    req = urllib.request.Request(base_url.rstrip("/") + "/v1/models")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = json.loads(r.read())
        headers = r.headers
    card = body["data"][0]
    return ReplicaIdentity(
        fingerprint=card["system_fingerprint"],
        fields={k: str(v) for k, v in (card.get("fingerprint_fields") or {}).items()},
        model=card.get("root", card["id"]),
        version=headers.get("X-Detllm-Version", ""),
        backend=headers.get("X-Detllm-Backend", ""),
        policy=headers.get("X-Detllm-Determinism", ""),
        max_model_len=int(card.get("max_model_len", 0)),
    )


def differences(reference: ReplicaIdentity,
                other: ReplicaIdentity) -> List[Tuple[str, str, str]]:
    """(field, reference's value, other's value) for every field that differs; [] when equal.

    Equal fingerprints are equal numerics whatever else is said. Unequal ones always give at
    least one line: the fingerprint itself when no published field explains it."""
    if reference.fingerprint == other.fingerprint:
        return []
    a, b = reference.comparable(), other.comparable()
    out = [(k, a.get(k, "(absent)"), b.get(k, "(absent)"))
           for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    if reference.policy != other.policy:
        out.append(("policy", reference.policy, other.policy))
    if not out:
        out.append(("system_fingerprint", reference.fingerprint, other.fingerprint))
    return out


def check_same(reference_name: str, reference: ReplicaIdentity, name: str,
               identity: ReplicaIdentity) -> None:
    """Raises FingerprintMismatch naming the replica and each differing field."""
    diff = differences(reference, identity)
    if not diff:
        return
    lines = "\n".join(f"  {field}: {a!r} on {reference_name}, {b!r} on {name}"
                      for field, a, b in diff)
    raise FingerprintMismatch(
        f"replica {name} is refused: its numerics fingerprint {identity.fingerprint} differs "
        f"from {reference_name}'s {reference.fingerprint}, so it would not give the same bits "
        f"for a deterministic request. Fields that differ:\n{lines}\n"
        f"Start every replica with the same model file, `detllm serve` options that change "
        f"numerics (--mode, --numerics, --activations, --kv-dtype ...), detllm build and kind of device "
        f"(docs/ray.md, \"Determinism across replicas\").",
        name, diff)


def check_all_same(identities: Sequence[Tuple[str, ReplicaIdentity]]) -> None:
    """The first replica is the reference; every other must match it."""
    if not identities:
        return
    ref_name, ref = identities[0]
    for name, ident in identities[1:]:
        check_same(ref_name, ref, name, ident)
