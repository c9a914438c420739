"""TRL's ``vllm-serve`` protocol over a ``detllm.LLM``: ``GRPOTrainer(vllm_mode="server")``'s
client (``trl.generation.vllm_client.VLLMClient``) talks to it as to ``trl vllm-serve``.

    python -m detllm.integrations.trl_server [--model PATH] [--host 127.0.0.1] [--port 8000]

Endpoints (paths with or without the trailing slash; bodies as TRL's client sends them):

| endpoint | body | answer |
|---|---|---|
| ``GET /health/`` | — | ``{"status": "ok"}`` |
| ``GET /get_world_size/`` | — | ``{"world_size": 1}`` |
| ``POST /generate/`` | ``prompts`` (texts or token-id lists), ``n``, ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``repetition_penalty``, ``max_tokens``, ``logprobs``, ``structured_outputs_regex``, ``generation_kwargs``, ``images`` (must be empty) | ``prompt_ids`` (one per prompt), ``completion_ids`` (``n`` per prompt, in order), ``logprobs`` / ``logprob_token_ids`` (per completion token: the sampled token first when ``logprobs=0``, else up to ``logprobs + 1`` entries by rank), ``seeds`` (detllm's: one per prompt) |
| ``POST /chat/`` | ``messages`` (a list of conversations), the fields above, ``chat_template_kwargs``, ``tools`` | as ``/generate/`` |
| ``POST /get_sequence_logprobs/`` | ``sequences``, ``prompt_lengths``, ``top_logprobs`` (≤ 20), ``temperature`` (1.0), ``response_format`` ``json`` or ``binary`` | TRL's: per completion position the top-k logprobs and ids; ``binary``: base64 float32/int32 arrays with ``shape``, ``completion_lengths`` and the actual tokens' logprobs |
| ``POST /reset_prefix_cache/`` | — | ``{"status": "ok"}`` |
| ``POST /close_communicator/`` | — | ``{"status": "ok"}`` |
| ``POST /init_communicator/``, ``/update_named_param/`` | — | 501: see below |

Concurrent requests are batched into one engine batch (``_batcher.py``); their bits do not
depend on it. Sampling fields that detllm does not have are refused by name (400, FastAPI's
``{"detail": ...}``), as is a temperature other than 1 with logprobs (the engine's logprobs are
raw; ``trl.py`` explains). ``reset_prefix_cache`` has nothing to do: a prefix-cache hit gives
the same bits as a recomputation (the contract), and a weight update rebuilds the engine with
an empty cache.

Weights: TRL's server mode pushes each parameter with an NCCL broadcast from the trainer's
GPU (``/init_communicator/`` then ``/update_named_param/``). This server has no NCCL group,
so both answer 501 naming the alternatives: the colocated ``rollout_func``
(``detllm.integrations.trl``), or ``detllm serve --weight-transfer`` with its ``path`` and
``shm`` backends (docs/server.md).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..sampling_params import MAX_LOGPROBS, SamplingParams, StructuredOutputsParams
from ._batcher import Batcher
from .trl import check_raw_logprobs_temperature

_SAMPLING_FIELDS = ("n", "repetition_penalty", "temperature", "top_p", "top_k", "min_p",
                    "max_tokens", "logprobs")


class HttpError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def _ranked(d: Mapping[int, Any], k: Optional[int] = None) -> List[Tuple[int, float]]:
    """A vLLM-style {token: Logprob} dict as (token, logprob) by rank; a token without a rank
    (the sampled one, outside the top k) last, as its true rank is beyond k."""
    items = sorted(d.items(), key=lambda kv: (kv[1].rank is None, kv[1].rank or 0))
    if k is not None:
        items = items[:k]
    return [(int(t), float(lp.logprob)) for t, lp in items]


class TrlProtocol:
    """The endpoints' logic, without HTTP: each method takes the decoded JSON body."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.batcher = Batcher(llm)

    def close(self) -> None:
        self.batcher.close()

    # ---- sampling ----
    def sampling(self, body: Mapping[str, Any]) -> Tuple[int, Optional[int], Dict[str, Any]]:
        fields = {k: body[k] for k in _SAMPLING_FIELDS if k in body and body[k] is not None}
        gen = body.get("generation_kwargs") or {}
        if not isinstance(gen, Mapping):
            raise HttpError(400, "generation_kwargs must be an object")
        fields.update(gen)
        regex = body.get("structured_outputs_regex")
        so = fields.pop("structured_outputs", None)
        if regex is not None:
            fields["structured_outputs"] = StructuredOutputsParams(regex=regex)
        elif isinstance(so, Mapping):
            fields["structured_outputs"] = StructuredOutputsParams(**so)
        elif so is not None:
            raise HttpError(400, "generation_kwargs.structured_outputs must be an object")
        n = int(fields.pop("n", 1))
        logprobs = fields.pop("logprobs", 0)
        if fields.get("top_k") is not None and fields["top_k"] < 0:
            fields["top_k"] = 0  # vLLM's -1: no top-k, detllm's 0
        if logprobs is not None:
            check_raw_logprobs_temperature(fields.get("temperature", 1.0), "generate")
            if not 0 <= int(logprobs) <= MAX_LOGPROBS:
                raise HttpError(400, f"logprobs={logprobs}: detllm returns 0 to {MAX_LOGPROBS} "
                                     "top logprobs per token")
        return n, logprobs, fields

    def _run(self, prompts: List[Any], body: Mapping[str, Any]) -> Dict[str, Any]:
        if body.get("images") and any(i is not None for i in body["images"]):
            raise HttpError(400, "images: detllm serves text models only (send images=null)")
        n, logprobs, fields = self.sampling(body)
        params = SamplingParams(n=n, logprobs=logprobs or None, **fields)
        outs = self.batcher.generate(prompts, [params] * len(prompts))
        completion_ids, lps, lp_ids = [], [], []
        for r in outs:
            for c in r.outputs:
                completion_ids.append(list(c.token_ids))
                if logprobs is None:
                    continue
                if not logprobs:
                    lps.append([[float(x)] for x in c.token_logprobs.tolist()])
                    lp_ids.append([[t] for t in c.token_ids])
                else:
                    ranked = [_ranked(d) for d in c.logprobs]
                    lps.append([[lp for _, lp in row] for row in ranked])
                    lp_ids.append([[t for t, _ in row] for row in ranked])
        return {
            "prompt_ids": [list(r.prompt_token_ids) for r in outs],
            "completion_ids": completion_ids,
            "logprobs": lps if logprobs is not None else None,
            "logprob_token_ids": lp_ids if logprobs is not None else None,
            "seeds": [r.seed for r in outs],
        }

    def generate(self, body: Mapping[str, Any]) -> Dict[str, Any]:
        prompts = body.get("prompts")
        if not isinstance(prompts, list) or not prompts:
            raise HttpError(400, "prompts must be a non-empty list of texts or of token-id lists")
        items = [{"prompt_token_ids": p} if isinstance(p, list) else p for p in prompts]
        return self._run(items, body)

    def chat(self, body: Mapping[str, Any]) -> Dict[str, Any]:
        convs = body.get("messages")
        if not isinstance(convs, list) or not convs or not all(isinstance(c, list) for c in convs):
            raise HttpError(400, "messages must be a non-empty list of conversations (lists of "
                                 "message objects)")
        if body.get("chat_template") is not None:
            raise HttpError(400, "chat_template: detllm renders the model's own template only")
        tok = self.llm.get_tokenizer()
        kwargs = body.get("chat_template_kwargs") or {}
        items = []
        for conv in convs:
            for m in conv:
                if isinstance(m.get("content"), list) and any(
                        isinstance(p, Mapping) and p.get("type") not in (None, "text") for p in m["content"]):
                    raise HttpError(400, "messages: only text content parts are supported")
            continue_final = bool(conv) and conv[-1].get("role") == "assistant"
            ids = tok.apply_chat_template(conv, tools=body.get("tools"), tokenize=True,
                                          add_generation_prompt=not continue_final,
                                          continue_final_message=continue_final, **kwargs)
            items.append({"prompt_token_ids": list(ids)})
        return self._run(items, body)

    def sequence_logprobs(self, body: Mapping[str, Any]) -> Dict[str, Any]:
        seqs, plens = body.get("sequences"), body.get("prompt_lengths")
        if not isinstance(seqs, list) or not isinstance(plens, list) or len(seqs) != len(plens):
            raise HttpError(400, "sequences and prompt_lengths must be lists of the same length")
        k = int(body.get("top_logprobs", 100))
        if not 1 <= k <= MAX_LOGPROBS:
            raise HttpError(400, f"top_logprobs={k}: detllm returns 1 to {MAX_LOGPROBS} top "
                                 f"logprobs per position (TRL's default is 100: pass "
                                 f"top_logprobs<={MAX_LOGPROBS})")
        if float(body.get("temperature", 1.0)) != 1.0:
            raise HttpError(400, f"temperature={body['temperature']}: detllm scores with the "
                                 "model's raw logprobs only (temperature=1.0)")
        fmt = body.get("response_format", "json")
        if fmt not in ("json", "binary"):
            raise HttpError(400, f"response_format must be 'json' or 'binary', not {fmt!r}")
        for i, (s, pl) in enumerate(zip(seqs, plens)):
            if not isinstance(pl, int) or not 0 <= pl <= len(s):
                raise HttpError(400, f"sequence {i}: prompt_length={pl} is outside [0, {len(s)}]")
            if len(s) < 2:
                raise HttpError(400, f"sequence {i}: a scored sequence needs at least 2 tokens")
        scores = self.batcher.call(lambda: self.llm.score(seqs, top_logprobs=k, use_tqdm=False))
        comp = [len(s) - pl for s, pl in zip(seqs, plens)]
        T = max(comp) if comp else 0
        top_lp = np.full((len(seqs), T, k), -np.inf, dtype=np.float32)
        top_id = np.zeros((len(seqs), T, k), dtype=np.int32)
        act_lp = np.full((len(seqs), T, 1), -np.inf, dtype=np.float32)
        act_id = np.zeros((len(seqs), T, 1), dtype=np.int32)
        for i, (s, pl, sc) in enumerate(zip(seqs, plens, scores)):
            for pos in range(max(pl, 1), len(s)):  # position 0 has no logprob (as vLLM's None)
                t = pos - pl
                act_lp[i, t, 0] = sc.logprobs[pos - 1]
                act_id[i, t, 0] = s[pos]
                for j, (tid, lp) in enumerate(_ranked(sc.top_logprobs[pos - 1], k)):
                    top_lp[i, t, j] = lp
                    top_id[i, t, j] = tid
        if fmt == "binary":
            b64 = lambda a: base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")  # noqa: E731
            return {"logprobs_b64": b64(top_lp), "token_ids_b64": b64(top_id),
                    "actual_logprobs_b64": b64(act_lp), "actual_token_ids_b64": b64(act_id),
                    "shape": [len(seqs), T, k], "completion_lengths": comp}
        return {
            "logprobs": [[[None if not np.isfinite(x) else float(x) for x in row]
                          for row in top_lp[i, :comp[i]]] for i in range(len(seqs))],
            "logprob_token_ids": [top_id[i, :comp[i]].tolist() for i in range(len(seqs))],
        }


_NO_NCCL = ("TRL's weight broadcast (/init_communicator/, /update_named_param/) needs an NCCL "
            "group with the trainer's GPU, which this server does not have. Run the rollout "
            "colocated instead (GRPOTrainer(rollout_func=detllm.integrations.trl."
            "make_rollout_func(llm)): the trainer's weights are written into the engine every "
            "step), or serve with `detllm serve --weight-transfer` and push the weights over its "
            "path or shm backends (docs/server.md, 'Weight updates from a trainer')")


def make_handler(proto: TrlProtocol):
    routes_get = {
        "/health": lambda b: {"status": "ok"},
        "/get_world_size": lambda b: {"world_size": 1},
        "/get_tensor_parallel_size": lambda b: {"tensor_parallel_size": 1},
    }
    routes_post = {
        "/generate": proto.generate,
        "/chat": proto.chat,
        "/get_sequence_logprobs": proto.sequence_logprobs,
        "/reset_prefix_cache": lambda b: {"status": "ok"},
        "/close_communicator": lambda b: {"status": "ok"},
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: TRL polls /health/
            pass

        def _reply(self, status: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _dispatch(self, routes) -> None:
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            body: Any = {}
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            try:
                if path in ("/init_communicator", "/update_named_param"):
                    raise HttpError(501, _NO_NCCL)
                fn = routes.get(path)
                if fn is None:
                    raise HttpError(404, f"no endpoint {self.command} {self.path} (TRL's vllm-serve "
                                         "protocol: /health/, /get_world_size/, /generate/, /chat/, "
                                         "/get_sequence_logprobs/, /reset_prefix_cache/)")
                if raw:
                    try:
                        body = json.loads(raw)
                    except json.JSONDecodeError as e:
                        raise HttpError(400, f"the body is not JSON: {e}") from None
                    if not isinstance(body, dict):
                        raise HttpError(400, "the body must be a JSON object")
                self._reply(200, fn(body))
            except HttpError as e:
                self._reply(e.status, {"detail": e.detail})
            except (ValueError, TypeError, RuntimeError) as e:
                # SamplingParams' refusals and the engine's errors (detllm.Error) are the
                # request's fault: a 400 with the message, as FastAPI's validation errors.
                self._reply(400, {"detail": str(e)})

        def do_GET(self):
            self._dispatch(routes_get)

        def do_POST(self):
            self._dispatch(routes_post)

    return Handler


class TrlServer:
    """The server on a thread: ``with TrlServer(llm, port=0) as s: s.url``."""

    def __init__(self, llm: Any, host: str = "127.0.0.1", port: int = 8000) -> None:
        self.proto = TrlProtocol(llm)
        self.httpd = ThreadingHTTPServer((host, port), make_handler(self.proto))
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread: Optional[threading.Thread] = None

    def start(self) -> "TrlServer":
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.proto.close()

    def __enter__(self) -> "TrlServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m detllm.integrations.trl_server",
                                 description="TRL's vllm-serve protocol over detllm.LLM")
    ap.add_argument("--model", default=None, help="GGUF file or HF directory (default: the default model)")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--mode", default="invariant")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    a = ap.parse_args(argv)
    import detllm

    llm = detllm.LLM(model=a.model, backend=a.backend, mode=a.mode, threads=a.threads)
    s = TrlServer(llm, a.host, a.port)
    print(f"detllm TRL server on {s.url} ({llm.model_name}, fingerprint {llm.fingerprint})",
          flush=True)
    try:
        s.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        s.httpd.server_close()
        s.proto.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
