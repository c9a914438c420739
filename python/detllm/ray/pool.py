"""LLMPool: the LLM calls of an RL loop spread over Ray replicas, and weight updates behind a
version barrier.

    pool = LLMPool(2, binary="build/detllm", model="step0.gguf")
    outs = pool.generate(["Once upon a time"] * 8, max_tokens=32, temperature=0.8, seed=1)
    pool.update_weights("ckpt/step1", version="1")          # a safetensors dir: in place
    pool.update_weights(trainer_state_dict, version="2")    # tensors: shm on this node
    pool.shutdown()

The replicas are `detllm serve --weight-transfer` processes (ReplicaSet); calls go through the
router over HTTP, so the pool needs neither the compiled Python module nor a GPU in the driver.
Each output carries the fingerprint, seed, replica and weight version that produced it.

update_weights is a barrier: new calls wait, the calls in flight finish on the old weights
(each response names one version), every replica takes the new weights in place through the
weight-sync endpoints (weight_transfer.py: staged on all, then finished on all), their
fingerprints are checked equal, and only then are calls let through again. A new model file
(GGUF, or a checkpoint of another architecture or config) restarts the replicas on it instead.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Tuple

from . import weight_transfer as wt
from .cluster import ReplicaSet
from .fingerprint import ReplicaIdentity, check_all_same, fetch_identity

# config.json keys that describe the file, not the model: a checkpoint differing only in these
# is the same architecture (its weights can go in place).
_CONFIG_NOISE = ("dtype", "torch_dtype", "transformers_version", "_name_or_path")


def _model_of(args: Sequence[str]) -> Optional[str]:
    for i, a in enumerate(args):
        if a == "--model" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--model="):
            return a.split("=", 1)[1]
    return None


def _backend_of(args: Sequence[str]) -> str:
    for i, a in enumerate(args):
        if a == "--backend" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--backend="):
            return a.split("=", 1)[1]
    return "cpu"


def _hf_config(path: Optional[str]) -> Optional[dict]:
    f = os.path.join(path, "config.json") if path and os.path.isdir(path) else None
    if f is None or not os.path.exists(f):
        return None
    with open(f) as fh:
        return {k: v for k, v in json.load(fh).items() if k not in _CONFIG_NOISE}


def needs_restart(current_model: Optional[str], new: str) -> Optional[str]:
    """Why `new` cannot go into the running replicas in place (None: it can).

    In place takes safetensors tensors by HF name into the loaded model; a GGUF file, or a
    checkpoint whose config.json differs from the running one's (another architecture, shapes,
    rope, experts ...), is a new model and needs a restart. config.json keys that describe the
    file (dtype, transformers_version, ...) are not compared."""
    if os.path.isfile(new) and not new.endswith(".safetensors"):
        return f"{new} is not a safetensors file (a new model file: the replicas restart on it)"
    cfg, running = _hf_config(new), _hf_config(current_model)
    # (A running GGUF has no config.json to compare with: the servers' name and shape checks
    # decide, and a refusal restarts.)
    if cfg is not None and running is not None and cfg != running:
        return (f"{new}/config.json differs from the running model's (another architecture or "
                "config: the replicas restart on it)")
    return None


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
                 weight_version: str = "0", concurrency: int = 64,
                 weight_transfer: Optional[bool] = None, keep_updates: bool = False,
                 **replica_set_options):
        """weight_transfer: start the replicas with --weight-transfer (the in-place update
        endpoints; the server then holds GGUF weights as fp32, the same logits, and runs the
        CPU backend only). None: on unless serve_args choose another backend. False:
        update_weights restarts the replicas.

        keep_updates: also keep each in-place update given as tensors (a safetensors file in a
        directory the pool owns), so that restart_replica can bring a crashed replica back to
        the pool's weights. Updates from a path are always remembered (by their path)."""
        args = list(serve_args) + (["--model", model] if model else [])
        if weight_transfer is None:
            weight_transfer = _backend_of(args) == "cpu"
        if weight_transfer and "--weight-transfer" not in args:
            args.append("--weight-transfer")
        rs = ReplicaSet(n, args, binary=binary, address=address,
                        weight_version=weight_version, **replica_set_options)
        rs.start()
        self._attach(rs, concurrency, keep_updates)

    @classmethod
    def from_replicas(cls, replicas: ReplicaSet, concurrency: int = 64) -> "LLMPool":
        """A pool over a ReplicaSet already started."""
        pool = cls.__new__(cls)
        pool._attach(replicas, concurrency)
        return pool

    def _attach(self, replicas: ReplicaSet, concurrency: int, keep_updates: bool = False) -> None:
        self.replicas = replicas
        self.url = replicas.url
        self.api_key = replicas.api_key
        self.concurrency = concurrency
        # How the last update_weights moved the weights: {"method": "in_place" | "restart",
        # "backend": "path" | "shm" | None, "seconds", "reason"} (None before the first).
        self.last_update: Optional[dict] = None
        # Set once the running processes hold in-place weights (a restart would lose them).
        self._in_place_version: Optional[str] = None
        # The in-place updates since the processes loaded their model file, in order, for
        # restart_replica: (version, safetensors path, or None where the tensors were not kept),
        # and the version label of the file itself.
        self.keep_updates = keep_updates
        self._updates: List[Tuple[str, Optional[str]]] = []
        self._file_version = replicas.weight_version
        self._kept_dir: Optional[str] = None

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
    def update_weights(self, weights, version: str, backend: str = "auto",
                       timeout: float = 600.0) -> str:
        """Every replica serves `weights` as `version` when this returns; returns the fingerprint.

        weights: a safetensors file or directory (HF names; every replica reads it: a shared
        filesystem across nodes), a mapping or iterable of (HF name, numpy array / torch tensor)
        (float32, bfloat16, float16), or a new model file (GGUF, or a checkpoint with another
        config.json), on which the replicas restart. backend for tensors: "shm" (shared
        memory; every replica on this node), "path" (a temporary safetensors file), "auto"
        (shm when every replica is on this node)."""
        t0 = time.perf_counter()
        rs, router = self.replicas, self.replicas.router
        if backend not in ("auto", "shm", "path"):
            raise ValueError(f"backend {backend!r}: 'auto', 'shm' or 'path'")
        in_place = "--weight-transfer" in rs.serve_args
        reason = None
        if isinstance(weights, (str, os.PathLike)):
            weights = os.fspath(weights)
            reason = needs_restart(_model_of(rs.serve_args), weights)
            if not in_place and reason is None:
                reason = "the replicas run without --weight-transfer"
        elif not in_place:
            raise ValueError("tensors can only go into replicas started with --weight-transfer "
                             "(LLMPool(weight_transfer=True), the default)")
        elif self.keep_updates:
            # Read twice (staged, then kept): an iterator would be spent by the first.
            weights = list(weights.items()) if hasattr(weights, "items") else list(weights)
        router.pause(timeout)  # new calls wait; the ones in flight end on the old weights
        try:
            if reason is None:
                staged = (wt.stage_path(weights) if isinstance(weights, str) else
                          wt.stage_tensors(weights, self._tensor_backend(backend)))
                try:
                    fp = self._update_in_place(staged, version, timeout)
                except wt.WeightTransferError as e:
                    if not (e.refused and isinstance(weights, str)):
                        raise
                    # The server's checks refused the checkpoint's names or shapes (nothing was
                    # written): another model, so a restart on it.
                    reason = f"refused in place ({e}); the replicas restart on it"
                finally:
                    staged.close()
                if reason is None:
                    self._remember(weights, version)
                    self.last_update = {"method": "in_place", "backend": staged.backend,
                                        "seconds": time.perf_counter() - t0, "reason": None}
                    return fp
            fp = self._restart_on(weights, version, timeout)
            self.last_update = {"method": "restart", "backend": None,
                                "seconds": time.perf_counter() - t0, "reason": reason}
            return fp
        finally:
            router.resume()

    def _tensor_backend(self, backend: str) -> str:
        if backend != "auto":
            return backend
        import ray

        here = {"127.0.0.1", "localhost", ray.util.get_node_ip_address()}
        nodes = {info.get("node") for info in self.replicas.infos.values()}
        return "shm" if nodes <= here else "path"

    def _urls(self) -> dict:
        return {n: info["url"] for n, info in self.replicas.infos.items()}

    def _update_in_place(self, staged: "wt.Staged", version: str, timeout: float) -> str:
        import ray

        rs, router, urls = self.replicas, self.replicas.router, self._urls()
        sessions, error = wt.stage_everywhere(urls, staged, self.api_key, timeout)
        if error is not None:
            self._close_sessions({n: urls[n] for n in sessions}, timeout)
            raise error
        answers, failed = wt.finish_everywhere(urls, version, self.api_key, timeout)
        if failed:
            # Some replicas hold the new version and these do not: out of the router until
            # they are restarted (the health check keeps them out: their fingerprint is old).
            for n in failed:
                rs.router.backends[n].state = "down"
            lines = "\n".join(f"  {n}: {m}" for n, m in sorted(failed.items()))
            raise wt.WeightTransferError(
                f"/finish_weight_update failed on {len(failed)} of {len(urls)} replicas; they "
                f"are taken out of the router:\n{lines}", failed, refused=False)
        idents = [(n, fetch_identity(urls[n], self.api_key)) for n in urls]
        for n, ident in idents:
            if ident.fingerprint != answers[n]["system_fingerprint"]:
                raise RuntimeError(f"replica {n} reports {ident.fingerprint} after finishing "
                                   f"the update as {answers[n]['system_fingerprint']}")
        check_all_same(idents)  # one fingerprint: the same weights and version everywhere
        router.replace_reference(*idents[0])
        ray.get([rs.actors[n].set_weight_version.remote(version) for n in urls])
        for n, ident in idents:
            rs.infos[n] = {**rs.infos[n], "weight_version": version, "identity": ident.__dict__}
            router.update_replica(n, urls[n], version, ident)
        rs.weight_version = version
        self._in_place_version = version
        return idents[0][1].fingerprint

    def _close_sessions(self, urls: dict, timeout: float) -> None:
        """Ends the update sessions a failed staging left open, writing nothing. Finishing under
        the version the process already serves writes no tensor (none is staged) and rebuilds
        the same identity; before any in-place update the process is restarted instead (its
        identity is the model file's hash, which no version string reproduces)."""
        if not urls:
            return
        if self._in_place_version is not None:
            wt.finish_everywhere(urls, self._in_place_version, self.api_key, timeout)
            return
        for n in urls:
            self.replicas.restart(n)

    def _restart_on(self, model: str, version: str, timeout: float) -> str:
        import ray

        rs, router = self.replicas, self.replicas.router
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
        rs.weight_version = version
        self._in_place_version = None  # the processes hold the file's weights again
        self._updates, self._file_version = [], version
        return idents[0][1].fingerprint

    # ----- a replica back after a crash ---------------------------------------------------
    def _remember(self, weights, version: str) -> None:
        """Records an in-place update for restart_replica (the path, or a kept copy)."""
        if isinstance(weights, str):
            self._updates.append((version, os.path.abspath(weights)))
            return
        kept = None
        if self.keep_updates:
            if self._kept_dir is None:
                self._kept_dir = tempfile.mkdtemp(prefix="detllm-pool-updates-")
            kept = os.path.join(self._kept_dir, f"update-{len(self._updates):04d}.safetensors")
            items = weights.items() if hasattr(weights, "items") else weights
            wt.write_safetensors(kept, [(n, *wt.as_bytes(n, t)) for n, t in items])
        self._updates.append((version, kept))

    def restart_replica(self, name: str, timeout: float = 600.0) -> dict:
        """Restarts one replica's process (after a crash) and brings it to the pool's weights
        before it gets traffic: the process loads its model file, the in-place updates since
        that file are applied again in their order (each through the same weight-sync
        endpoints), and the router admits it only if its fingerprint is then the pool's —
        the same check as any replica gets. Other replicas keep serving meanwhile.
        Raises RuntimeError, naming the version, when an update was given as tensors that
        the pool did not keep (LLMPool(keep_updates=True) keeps them)."""
        import ray

        rs, router = self.replicas, self.replicas.router
        lost = [v for v, p in self._updates if p is None]
        if lost:
            raise RuntimeError(
                f"replica {name} cannot be brought back to weight version {self._updates[-1][0]}: "
                f"the update(s) {', '.join(lost)} came as tensors and were not kept (start the "
                f"pool with keep_updates=True, or update_weights from a path / restart the pool "
                f"on a checkpoint)")
        with router.lock:
            if name in router.backends:
                router.backends[name].state = "down"  # no traffic until it is brought back
        info = ray.get(rs.actors[name].restart.remote(None, self._file_version), timeout=timeout)
        url, version = info["url"], self._file_version
        for version, path in self._updates:
            staged = wt.stage_path(path)
            try:
                _, error = wt.stage_everywhere({name: url}, staged, self.api_key, timeout)
                if error is not None:
                    raise error
                _, failed = wt.finish_everywhere({name: url}, version, self.api_key, timeout)
                if failed:
                    raise wt.WeightTransferError(
                        f"replica {name}: applying version {version} again failed: "
                        f"{failed[name]}", failed, refused=False)
            finally:
                staged.close()
        ident = fetch_identity(url, self.api_key)
        router.update_replica(name, url, version, ident)  # FingerprintMismatch if it differs
        ray.get(rs.actors[name].set_weight_version.remote(version))
        info = {**info, "weight_version": version, "identity": ident.__dict__}
        rs.infos[name] = info
        return info

    def shutdown(self) -> None:
        self.replicas.shutdown()
        if self._kept_dir is not None:
            shutil.rmtree(self._kept_dir, ignore_errors=True)
            self._kept_dir = None
