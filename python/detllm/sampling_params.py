"""SamplingParams: vLLM's field names, the engine's meaning (kernels/sampling/sampling_params.h)."""

from __future__ import annotations

import dataclasses
import secrets
from typing import Optional, Sequence, Union

from . import _core

MAX_LOGPROBS = 20  # as the engine (and OpenAI's top_logprobs)


@dataclasses.dataclass
class SamplingParams:
    """How to sample. ``seed=None`` draws a seed and reports it in ``RequestOutput.seed``, so
    every output can be replayed; ``temperature=0`` is greedy (ties go to the lowest token id).
    ``logprobs=k`` adds the top-k logprobs per token (the sampled token's own logprob is always
    returned, as ``CompletionOutput.token_logprobs``); ``prompt_logprobs=k`` scores the prompt.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    max_tokens: int = 16
    stop: Union[None, str, Sequence[str]] = None
    stop_token_ids: Optional[Sequence[int]] = None
    ignore_eos: bool = False
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}")
        if self.max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {self.max_tokens}")
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None and not 0 <= v <= MAX_LOGPROBS:
                raise ValueError(f"{name} must be in 0..{MAX_LOGPROBS}, got {v}")
        if self.top_k == -1:  # vLLM's "off"
            self.top_k = 0
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {self.seed}")

    def _request(self, prompt_ids: Sequence[int]) -> "_core.GenerateRequest":
        """The engine request for one prompt (draws the seed when none was given)."""
        r = _core.GenerateRequest()
        r.prompt = list(prompt_ids)
        s = _core.EngineSamplingParams()
        s.temperature = float(self.temperature)
        s.top_k = int(self.top_k)
        s.top_p = float(self.top_p)
        s.min_p = float(self.min_p)
        s.seed = int(self.seed) if self.seed is not None else secrets.randbits(63)
        s.n_logprobs = int(self.logprobs or 0)
        r.sampling = s
        r.max_tokens = int(self.max_tokens)
        r.n = int(self.n)
        r.stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        r.stop_token_ids = [int(t) for t in (self.stop_token_ids or [])]
        r.ignore_eos = bool(self.ignore_eos)
        r.prompt_logprobs = -1 if self.prompt_logprobs is None else int(self.prompt_logprobs)
        return r
