"""A rollout with verl's interface over a ``detllm.LLM``.

verl drives its rollout engines through two surfaces, both given here by ``DetllmRollout``:

- the rollout worker's (``verl.workers.rollout.base.BaseRollout``): ``async resume(tags)``,
  ``async update_weights(weights, **kwargs)`` (an iterator of ``(name, tensor)``) and
  ``async release()``;
- the rollout server's token-in-token-out call, used by verl's agent loops:
  ``async generate(prompt_ids, sampling_params, request_id, image_data=None, ...)``, which
  returns a ``TokenOutput`` (``token_ids``, ``log_probs``, ``routed_experts``,
  ``stop_reason`` "completed" / "aborted", ``num_preempted``).

How each is mapped:

- **generate.** ``sampling_params`` is verl's dict: ``max_tokens`` (or sglang's
  ``max_new_tokens``; default ``response_length`` of the config), ``temperature``, ``top_p``,
  ``top_k`` (-1: off), ``logprobs`` (a bool: the sampled token's logprob), any other
  ``detllm.SamplingParams`` field (an unknown one is refused by name). Calls that overlap
  are handed to the engine as one batch (``_batcher.py``); a deterministic request's bits do
  not depend on what shares its batch. Routed experts (MoE models) come back when the config's
  ``enable_rollout_routing_replay`` is set or ``return_routed_experts=True`` is passed: an
  int32 array (tokens, layers, k), row *i* the routing of the forward that produced token *i*.
- **Seeds.** verl passes no seed; a request's seed is derived from (``seed``, ``request_id``),
  so the same request id replays bit for bit (verl's request ids are unique per sample). A
  ``seed`` in ``sampling_params`` takes precedence.
- **update_weights.** The tensors (torch on the CPU or the engine's GPU, or numpy) are
  written by Hugging Face name (``llm.update_weights``: every name, shape and dtype is checked
  first). ``kwargs["global_steps"]`` (verl's name), ``version`` or a counter names the
  version the fingerprint carries.
- **release / resume.** ``release`` is ``llm.sleep`` (the KV pool; level 2 also the device
  copy of the weights on CUDA); ``resume(tags)`` wakes the engine when it sleeps. verl wakes
  weights and KV cache separately (``["weights"]`` then ``["kv_cache"]``); detllm brings both
  back together, so the first resume does it and the second finds the engine awake.
- **full_determinism.** verl's flag means vLLM's batch-invariant mode; every detllm mode
  except ``fast`` is batch-invariant, and ``invariant`` (the default) is what this uses.

No import of verl or torch: ``TokenOutput`` here has verl's field names (``as_verl()``
builds verl's own pydantic object where verl is installed).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from ..sampling_params import SamplingParams
from ._batcher import Batcher
from .trl import derived_seed

_TAGS = ("weights", "kv_cache")


@dataclasses.dataclass
class TokenOutput:
    """verl's ``TokenOutput`` (verl/workers/rollout/replica.py), field for field."""

    token_ids: List[int]
    log_probs: Optional[List[float]] = None
    routed_experts: Optional[Any] = None
    stop_reason: Optional[str] = None  # "completed" | "aborted" | None
    num_preempted: Optional[int] = None

    def as_verl(self) -> Any:
        from verl.workers.rollout.replica import TokenOutput as VerlTokenOutput

        return VerlTokenOutput(**dataclasses.asdict(self))


def _cfg(config: Any, name: str, default: Any = None) -> Any:
    if config is None:
        return default
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


class DetllmRollout:
    """verl's rollout interface over ``llm``.

    config: verl's rollout config (a dataclass, an OmegaConf node or a dict) or None; read:
    ``response_length``, ``prompt_length``, ``max_model_len``, ``enable_rollout_routing_replay``,
    ``free_cache_engine``. seed: the base of the seeds derived from request ids.
    release_level: the ``llm.sleep`` level of ``release`` (2 frees the device weights too).
    """

    def __init__(self, llm: Any, config: Any = None, *, seed: int = 0, release_level: int = 1) -> None:
        self.llm = llm
        self.config = config
        self.seed = int(seed)
        self.release_level = int(release_level)
        self.batcher = Batcher(llm)
        self.updates = 0

    def close(self) -> None:
        self.batcher.close()

    # ---- generation ----
    def _params(self, prompt_len: int, sampling_params: Mapping[str, Any], request_id: str):
        sp = dict(sampling_params)
        if "max_tokens" in sp:
            max_tokens = sp.pop("max_tokens")
        elif "max_new_tokens" in sp:
            max_tokens = sp.pop("max_new_tokens")
        else:
            rl = _cfg(self.config, "response_length")
            if rl is None:
                raise ValueError("generate: no max_tokens in sampling_params and no "
                                 "response_length in the rollout config")
            max_tokens = rl
        max_len = _cfg(self.config, "max_model_len")
        if max_len:
            if prompt_len > max_len:
                raise ValueError(f"generate: the prompt ({prompt_len} tokens) exceeds "
                                 f"max_model_len ({max_len})")
            max_tokens = min(max_tokens, max_len - prompt_len)
        want_logprobs = bool(sp.pop("logprobs", False))
        if sp.get("top_k") is not None and sp["top_k"] < 0:
            sp["top_k"] = 0  # vLLM's -1: no top-k, detllm's 0
        if _cfg(self.config, "enable_rollout_routing_replay", False):
            sp.setdefault("return_routed_experts", True)
        seed = sp.pop("seed", None)
        if seed is None:
            seed = derived_seed(self.seed, request_id)
        return SamplingParams(n=1, seed=int(seed), max_tokens=max(0, int(max_tokens)), **sp), want_logprobs

    def generate_future(self, prompt_ids: Sequence[int], sampling_params: Mapping[str, Any],
                        request_id: str, image_data: Optional[list] = None,
                        video_data: Optional[list] = None, priority: int = 0):
        """The same as ``generate``, for a caller without an event loop: (whether logprobs
        were asked, a concurrent.futures.Future of the RequestOutput list)."""
        if image_data or video_data:
            raise ValueError("generate: detllm serves text models only (image_data/video_data)")
        ids = [int(t) for t in prompt_ids]
        p, want_logprobs = self._params(len(ids), sampling_params, str(request_id))
        return want_logprobs, self.batcher.generate_future([{"prompt_token_ids": ids}], [p])

    async def generate(self, prompt_ids: Sequence[int], sampling_params: Mapping[str, Any],
                       request_id: str, image_data: Optional[list] = None,
                       video_data: Optional[list] = None, priority: int = 0) -> TokenOutput:
        """verl's token-in-token-out generate: one sample of ``prompt_ids``."""
        want_logprobs, fut = self.generate_future(prompt_ids, sampling_params, request_id,
                                                  image_data, video_data, priority)
        out = (await asyncio.wrap_future(fut))[0]
        return self.token_output(out, want_logprobs)

    @staticmethod
    def token_output(out: Any, want_logprobs: bool) -> TokenOutput:
        c = out.outputs[0]
        stop = {"stop": "completed", "length": "completed", "abort": "aborted"}.get(c.finish_reason)
        return TokenOutput(
            token_ids=list(c.token_ids),
            log_probs=c.token_logprobs.tolist() if want_logprobs else None,
            routed_experts=c.routed_experts,
            stop_reason=stop if stop is not None else c.finish_reason,
            num_preempted=None,  # the engine does not count them per request
        )

    def generate_sequences(self, prompts: Any) -> Any:
        raise NotImplementedError("generate_sequences (verl's synchronous DataProto path) is not "
                                  "provided: verl's agent loop calls the async generate(prompt_ids, "
                                  "sampling_params, request_id)")

    # ---- weights and memory ----
    async def update_weights(self, weights: Iterable[Any], **kwargs: Any) -> None:
        """Writes (name, tensor) pairs into the engine, between batches."""
        self.updates += 1
        version = kwargs.get("version", kwargs.get("global_steps"))
        version = f"verl-step-{version}" if version is not None else f"verl-update-{self.updates}"
        pairs = list(weights)

        def write() -> None:
            self.llm.update_weights(pairs, version=version)

        await asyncio.wrap_future(self.batcher.call_future(write))

    async def release(self) -> None:
        def sleep() -> None:
            if not self.llm.sleeping:
                self.llm.sleep(self.release_level)

        await asyncio.wrap_future(self.batcher.call_future(sleep))

    async def resume(self, tags: Sequence[str]) -> None:
        bad = [t for t in tags if t not in _TAGS]
        if bad:
            raise ValueError(f"resume: unknown tag(s) {bad} (verl's are {list(_TAGS)})")

        def wake() -> None:
            if self.llm.sleeping:
                self.llm.wake_up()

        await asyncio.wrap_future(self.batcher.call_future(wake))
