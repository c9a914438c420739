"""Weights into running replicas through `detllm serve --weight-transfer`'s endpoints
(docs/server.md, "Weight updates from a trainer"): /init_weight_transfer_engine,
/start_weight_update, /update_weights, /finish_weight_update.

Two backends, both the server's:
- path: every replica reads one safetensors file or directory (a checkpoint the trainer saved;
  tensors given in memory are written to a temporary file first). Replicas on other nodes need
  the path on a shared filesystem.
- shm: one POSIX shared-memory object per tensor, written once by this process and read by
  every replica on this node during its /update_weights call (no file, no copy per replica).

The update is two-phase so that one bad tensor writes nothing anywhere: every replica first
stages (its /update_weights checks every name, shape and dtype before staging anything), and
only when all have staged does any replica finish (write + rebuild under the new version).
"""
from __future__ import annotations

import json
import os
import struct
import tempfile
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

# numpy / torch dtype name -> (safetensors dtype, the server's dtype_names entry)
_DTYPES = {"float32": ("F32", "float32"), "float16": ("F16", "float16"),
           "bfloat16": ("BF16", "bfloat16")}


class WeightTransferError(RuntimeError):
    """A replica refused or failed a step of the update; `answers` maps replica -> message."""

    def __init__(self, message: str, answers: Dict[str, str], refused: bool):
        super().__init__(message)
        self.answers = answers
        self.refused = refused  # True: the server's checks said no (400): nothing was staged


def as_bytes(name: str, t) -> Tuple[str, List[int], bytes]:
    """(dtype name, shape, row-major little-endian bytes) of a numpy array or torch tensor."""
    if hasattr(t, "detach"):  # torch: bf16 has no numpy dtype, its bits go as int16
        t = t.detach().cpu().contiguous()
        dtype = str(t.dtype).replace("torch.", "")
        if dtype == "bfloat16":
            import torch

            arr = t.view(torch.int16).numpy()
        else:
            arr = t.numpy()
    else:
        import numpy as np

        arr = np.ascontiguousarray(t)
        dtype = arr.dtype.name
    if dtype not in _DTYPES:
        raise ValueError(f"{name}: dtype {dtype} is not accepted (float32, bfloat16 or float16; "
                         "float64 would be rounded, so it is refused)")
    return dtype, list(arr.shape), arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()


def write_safetensors(path: str, tensors: Sequence[Tuple[str, str, List[int], bytes]]) -> None:
    """A safetensors file: 8-byte header length, JSON header (8-aligned), the raw data."""
    header, offset = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": _DTYPES[dtype][0], "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, _, _, data in tensors:
            f.write(data)


def _post(url: str, path: str, body: Optional[dict], api_key: Optional[str],
          timeout: float) -> dict:
    data = b"" if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _error_text(e: BaseException) -> Tuple[str, bool]:
    if isinstance(e, urllib.error.HTTPError):
        try:
            msg = json.loads(e.read())["error"]["message"]
        except Exception:  # noqa: BLE001  (not the server's JSON error)
            msg = str(e)
        return f"HTTP {e.code}: {msg}", e.code == 400
    return f"{e.__class__.__name__}: {e}", False


class Staged:
    """Tensors made available to the replicas for one update (a path, or shm objects)."""

    def __init__(self, backend: str, update_info: dict, cleanup: Callable[[], None]):
        self.backend, self.update_info, self._cleanup = backend, update_info, cleanup

    def close(self) -> None:
        self._cleanup()


def stage_path(path: str) -> Staged:
    return Staged("path", {"path": os.path.abspath(path)}, lambda: None)


def stage_tensors(named, backend: str) -> Staged:
    """Tensors given in memory: shm objects (backend "shm") or a temporary safetensors file."""
    items = list(named.items()) if isinstance(named, Mapping) else list(named)
    if not items:
        raise ValueError("update_weights: no tensors given")
    converted = [(n, *as_bytes(n, t)) for n, t in items]
    if backend == "path":
        d = tempfile.mkdtemp(prefix="detllm-weights-")
        f = os.path.join(d, "model.safetensors")
        write_safetensors(f, converted)

        def rm():
            os.unlink(f)
            os.rmdir(d)

        return Staged("path", {"path": f}, rm)
    from multiprocessing import shared_memory

    segments = []
    try:
        for _, _, _, data in converted:
            shm = shared_memory.SharedMemory(create=True, size=max(1, len(data)))
            shm.buf[:len(data)] = data
            segments.append(shm)
    except BaseException:
        for shm in segments:
            shm.close()
            shm.unlink()
        raise

    def unlink():
        for shm in segments:
            shm.close()
            shm.unlink()

    info = {"names": [n for n, *_ in converted],
            "dtype_names": [_DTYPES[d][1] for _, d, _, _ in converted],
            "shapes": [s for _, _, s, _ in converted],
            "shm_names": ["/" + shm.name.lstrip("/") for shm in segments]}
    return Staged("shm", info, unlink)


def _each(urls: Mapping[str, str], fn) -> Tuple[Dict[str, object], Dict[str, BaseException]]:
    ok, failed = {}, {}
    with ThreadPoolExecutor(max(1, len(urls))) as ex:
        futs = {name: ex.submit(fn, url) for name, url in urls.items()}
        for name, f in futs.items():
            try:
                ok[name] = f.result()
            except BaseException as e:  # noqa: BLE001  (reported per replica)
                failed[name] = e
    return ok, failed


def stage_everywhere(urls: Mapping[str, str], staged: Staged, api_key: Optional[str],
                     timeout: float) -> Tuple[List[str], Optional[WeightTransferError]]:
    """Phase 1 on every replica: init, start, update_weights (staged, nothing written).
    Returns (replicas with an update session open, the error or None)."""
    opened: List[str] = []

    def one(url):
        _post(url, "/init_weight_transfer_engine", {"init_info": {"backend": staged.backend}},
              api_key, timeout)
        _post(url, "/start_weight_update", {"is_checkpoint_format": True}, api_key, timeout)
        opened.append(url)
        return _post(url, "/update_weights", {"update_info": staged.update_info}, api_key,
                     timeout)

    ok, failed = _each(urls, one)
    sessions = [n for n, u in urls.items() if u in opened]
    if not failed:
        return sessions, None
    answers, refused = {}, True
    for name, e in failed.items():
        answers[name], was_400 = _error_text(e)
        refused = refused and was_400
    lines = "\n".join(f"  {n}: {m}" for n, m in sorted(answers.items()))
    return sessions, WeightTransferError(
        f"the weight update was not staged on {len(failed)} of {len(urls)} replicas (nothing "
        f"was written on any):\n{lines}", answers, refused)


def finish_everywhere(urls: Mapping[str, str], version: str, api_key: Optional[str],
                      timeout: float) -> Tuple[Dict[str, dict], Dict[str, str]]:
    """Phase 2: /finish_weight_update on every replica; (answers, failures as text)."""
    ok, failed = _each(urls, lambda url: _post(url, "/finish_weight_update",
                                               {"weight_version": version}, api_key, timeout))
    return ok, {n: _error_text(e)[0] for n, e in failed.items()}
