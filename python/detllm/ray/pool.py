"""LLMPool: the LLM calls of an RL loop spread over Ray replicas, and weight updates behind a
version barrier.

    pool = LLMPool(2, binary="build/detllm", model="step0.gguf")
    outs = pool.generate(["Once upon a time"] * 8, max_tokens=32, temperature=0.8, seed=1)
    pool.update_weights("step1.gguf", version="1")   # returns when every replica serves it
    pool.shutdown()

The replicas are `detllm serve` processes (ReplicaSet); calls go through the router over HTTP,
so the pool needs neither the compiled Python module nor a GPU in the driver. Each output
carries the fingerprint, seed, replica and weight version that produced it.

update_weights is a barrier: new calls wait, the calls in flight finish on the old weights
(each response names one version), every replica restarts on the new checkpoint, their
fingerprints are checked equal, and only then are calls let through again. The server has no
in-place weight-update endpoint here, so "update" means a restart on the new file; the barrier
and the version labels are the same whatever moves the weights.
"""
from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence

from .cluster import ReplicaSet
from .fingerprint import ReplicaIdentity, check_all_same


def _without_model(args: Sequence[str]) -> List[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--model":
            skip = True
            continue
        if a.startswith("--model="):
            continue
        out.append(a)
    return out


class LLMPool:
    def __init__(self, n: int, model: Optional[str] = None, serve_args: Sequence[str] = (),
                 binary: Optional[str] = None, address: Optional[str] = None,
                 weight_version: str = "0", concurrency: int = 64, **replica_set_options):
        args = list(serve_args) + (["--model", model] if model else [])
        rs = ReplicaSet(n, args, binary=binary, address=address,
                        weight_version=weight_version, **replica_set_options)
        rs.start()
        self._attach(rs, concurrency)

    @classmethod
    def from_replicas(cls, replicas: ReplicaSet, concurrency: int = 64) -> "LLMPool":
        """A pool over a ReplicaSet already started."""
        pool = cls.__new__(cls)
        pool._attach(replicas, concurrency)
        return pool

    def _attach(self, replicas: ReplicaSet, concurrency: int) -> None:
        self.replicas = replicas
        self.url = replicas.url
        self.api_key = replicas.api_key
        self.concurrency = concurrency

    # ----- calls --------------------------------------------------------------------------
    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def _many(self, path: str, bodies: List[dict]) -> List[dict]:
        with ThreadPoolExecutor(min(self.concurrency, max(1, len(bodies)))) as ex:
            return list(ex.map(lambda b: self._post(path, b), bodies))

    @staticmethod
    def _output(r: dict, chat: bool) -> dict:
        c = r["choices"][0]
        lp = c.get("logprobs") or {}
        if chat:
            ids = [t["token_id"] for t in lp.get("content") or []]
            lps = [t["logprob"] for t in lp.get("content") or []]
            text = c["message"]["content"]
        else:
            ids, lps, text = lp.get("token_ids", []), lp.get("token_logprobs", []), c["text"]
        return {"text": text, "token_ids": ids, "logprobs": lps,
                "finish_reason": c["finish_reason"], "fingerprint": r["system_fingerprint"],
                "seed": r["seed"], "replica": r["replica"],
                "weight_version": r["weight_version"]}

    def generate(self, prompts: Sequence, **params) -> List[dict]:
        """One completion per prompt (a string or token ids); params are the server's fields
        (max_tokens, temperature, seed, ...). With a seed, prompt i uses seed + i."""
        seed = params.pop("seed", None)
        bodies = []
        for i, p in enumerate(prompts):
            b = {"prompt": p, "logprobs": 0, **params}
            if seed is not None:
                b["seed"] = seed + i
            bodies.append(b)
        return [self._output(r, False) for r in self._many("/v1/completions", bodies)]

    def chat(self, conversations: Sequence[List[dict]], **params) -> List[dict]:
        seed = params.pop("seed", None)
        bodies = []
        for i, m in enumerate(conversations):
            b = {"messages": m, "logprobs": True, **params}
            if seed is not None:
                b["seed"] = seed + i
            bodies.append(b)
        return [self._output(r, True) for r in self._many("/v1/chat/completions", bodies)]

    def score(self, sequences: Sequence) -> List[dict]:
        """Each sequence's prompt logprobs (the first is None), as generation reported them."""
        bodies = [{"prompt": s, "max_tokens": 0, "echo": True, "logprobs": 0} for s in sequences]
        out = []
        for r in self._many("/v1/completions", bodies):
            lp = r["choices"][0]["logprobs"]
            out.append({"token_ids": lp["token_ids"], "logprobs": lp["token_logprobs"],
                        "fingerprint": r["system_fingerprint"], "replica": r["replica"],
                        "weight_version": r["weight_version"]})
        return out

    # ----- weights ------------------------------------------------------------------------
    def update_weights(self, model: str, version: str, timeout: float = 600.0) -> str:
        """Every replica serves `model` as `version` when this returns; returns the fingerprint."""
        import ray

        rs, router = self.replicas, self.replicas.router
        router.pause(timeout)  # new calls wait; the ones in flight end on the old weights
        try:
            rs.serve_args = _without_model(rs.serve_args) + ["--model", model]
            names = list(rs.actors)
            infos = ray.get([rs.actors[n].restart.remote(rs.serve_args, version)
                             for n in names], timeout=timeout)
            idents = [(i["name"], ReplicaIdentity(**i["identity"])) for i in infos]
            check_all_same(idents)
            router.replace_reference(*idents[0])
            for info in infos:
                rs.infos[info["name"]] = info
                router.update_replica(info["name"], info["url"], version,
                                      ReplicaIdentity(**info["identity"]))
            return idents[0][1].fingerprint
        finally:
            router.resume()

    def shutdown(self) -> None:
        self.replicas.shutdown()
