"""Results, shaped like vLLM's (RequestOutput, CompletionOutput, Logprob), plus what makes them
replayable: the seed, the numerics fingerprint and the weight version. Logprobs are the engine's
fp32 values; the ``token_logprobs`` arrays are float32, so their bits can be compared exactly."""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

import numpy as np


@dataclasses.dataclass
class Logprob:
    logprob: float
    rank: Optional[int] = None  # 1 = most likely; None when outside the returned top-k
    decoded_token: Optional[str] = None


@dataclasses.dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    token_logprobs: np.ndarray  # (len(token_ids),) float32: each sampled token's logprob
    cumulative_logprob: float
    logprobs: Optional[List[Dict[int, Logprob]]]  # per token (vLLM's form) when logprobs=k
    finish_reason: str  # "length" | "stop" | "abort"
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    # SamplingParams.return_routed_experts: (len(token_ids), n_layers, k) int32, row i the
    # experts (best first, per layer) of the token before token i; None when not asked for.
    routed_experts: Optional[np.ndarray] = None

    def finished(self) -> bool:
        return self.finish_reason != "abort"


@dataclasses.dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    prompt_logprobs: Optional[List[Optional[Dict[int, Logprob]]]]  # [None, {...}, ...]
    outputs: List[CompletionOutput]
    seed: int
    fingerprint: str
    weight_version: str
    finished: bool = True
    # return_routed_experts with prompt_logprobs: (len(prompt_token_ids) - 1, n_layers, k)
    # int32, row i the experts of prompt token i (the row that scores token i + 1).
    prompt_routed_experts: Optional[np.ndarray] = None


@dataclasses.dataclass
class ScoreOutput:
    """``llm.score``: the logprob of every token of a sequence given the tokens before it."""

    token_ids: List[int]
    logprobs: np.ndarray  # (len(token_ids) - 1,) float32: logprobs[i] is token i + 1's
    top_logprobs: Optional[List[Dict[int, Logprob]]]
    fingerprint: str
    weight_version: str
