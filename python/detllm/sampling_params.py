"""SamplingParams: vLLM's field names, the engine's meaning (kernels/sampling/sampling_params.h)."""

from __future__ import annotations

import dataclasses
import json
import math
import secrets
from typing import Any, Mapping, Optional, Sequence, Union

from . import _core

MAX_LOGPROBS = 20  # as the engine (and OpenAI's top_logprobs)
MAX_LOGIT_BIAS = 1024  # entries of logit_bias, as the engine and the server
MAX_REPETITION_PENALTY = 100.0


@dataclasses.dataclass
class StructuredOutputsParams:
    """What the output must match (vLLM's ``StructuredOutputsParams``; exactly one field):
    ``json`` a JSON schema (a dict or its text), ``regex``, ``choice`` (a list of strings),
    ``grammar`` (EBNF, root rule ``root``) or ``json_object=True`` (any JSON object). The
    token is drawn from the ids the grammar allows; the reported logprobs stay the model's
    (docs/structured_output.md)."""

    json: Union[None, str, Mapping[str, Any]] = None
    regex: Optional[str] = None
    choice: Optional[Sequence[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None

    def __post_init__(self) -> None:
        given = [n for n in ("json", "regex", "choice", "grammar", "json_object")
                 if getattr(self, n) not in (None, False)]
        if len(given) != 1:
            raise ValueError("StructuredOutputsParams takes exactly one of json, regex, choice, "
                             f"grammar and json_object ({len(given)} given: {given})")
        if self.choice is not None and (isinstance(self.choice, str) or not self.choice or
                                        not all(isinstance(c, str) for c in self.choice)):
            raise ValueError("choice must be a non-empty list of strings")

    def _fill(self, r: "_core.GenerateRequest") -> None:
        if self.json is not None:
            r.structured_kind = "json"
            r.structured_text = self.json if isinstance(self.json, str) else json.dumps(self.json)
        elif self.regex is not None:
            r.structured_kind, r.structured_text = "regex", self.regex
        elif self.choice is not None:
            r.structured_kind, r.structured_choices = "choice", list(self.choice)
        elif self.grammar is not None:
            r.structured_kind, r.structured_text = "grammar", self.grammar
        else:
            r.structured_kind = "json_object"


# vLLM's earlier name for the same thing.
GuidedDecodingParams = StructuredOutputsParams


@dataclasses.dataclass
class SamplingParams:
    """How to sample. ``seed=None`` draws a seed and reports it in ``RequestOutput.seed``, so
    every output can be replayed; ``temperature=0`` is greedy (ties go to the lowest token id).
    ``logprobs=k`` adds the top-k logprobs per token (the sampled token's own logprob is always
    returned, as ``CompletionOutput.token_logprobs``); ``prompt_logprobs=k`` scores the prompt.

    Logit penalties, applied before the sampler in one fixed order with pinned fp32 rounding
    (``logit_bias``, then repetition, frequency, presence: kernels/sampling/logit_penalties.h),
    the same bits as the server's fields of the same names: ``presence_penalty`` and
    ``frequency_penalty`` (OpenAI's, in [-2, 2], over the generated tokens),
    ``repetition_penalty`` (transformers/vLLM's, in (0, 100], over prompt + generated) and
    ``logit_bias`` ({token id: bias in [-100, 100]}, at most 1024 entries). Logprobs are those
    of the penalised logits.

    Token rules, as vLLM's (masks on the draw; logprobs stay the model's): ``min_tokens`` (no
    end-of-text or stop id, no stop string before that many tokens), ``allowed_token_ids``,
    ``bad_words`` (strings the output never completes), and ``structured_outputs`` (a
    ``StructuredOutputsParams``; vLLM's older ``guided_decoding`` is the same field).

    ``skip_special_tokens`` (vLLM's, default True): whether ``text`` leaves special tokens out.
    vLLM fields without an implementation here (``logits_processors``, ``best_of`` > n,
    ``include_stop_str_in_output``, ``truncate_prompt_tokens``, ...) are refused by name when
    set (``ValueError``), never ignored.

    ``return_routed_experts`` (mixture-of-experts models; a dense model refuses it): each
    generated token's ``CompletionOutput.routed_experts`` row — and, with ``prompt_logprobs``,
    ``RequestOutput.prompt_routed_experts`` — holds the experts every layer chose for the token
    before it (the row that produced its logprob), for routing replay in training.
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
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: Optional[Mapping[int, float]] = None
    min_tokens: int = 0
    allowed_token_ids: Optional[Sequence[int]] = None
    bad_words: Optional[Sequence[str]] = None
    structured_outputs: Optional[StructuredOutputsParams] = None
    guided_decoding: Optional[StructuredOutputsParams] = None
    return_routed_experts: bool = False
    skip_special_tokens: bool = True
    # vLLM's fields that detllm does not implement: accepted only at their "off" value, so a
    # request that sets one is refused by name instead of running without it.
    logits_processors: Optional[Sequence[Any]] = None
    best_of: Optional[int] = None
    include_stop_str_in_output: bool = False
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: Optional[int] = None
    bad_words_ids: Optional[Sequence[Any]] = None
    extra_args: Optional[Mapping[str, Any]] = None
    detokenize: bool = True

    def __post_init__(self) -> None:
        _refuse_unsupported(self)
        if self.guided_decoding is not None:
            if self.structured_outputs is not None:
                raise ValueError("give structured_outputs or guided_decoding, not both")
            self.structured_outputs = self.guided_decoding
        if self.structured_outputs is not None and not isinstance(self.structured_outputs,
                                                                  StructuredOutputsParams):
            raise ValueError("structured_outputs must be a detllm.StructuredOutputsParams")
        if not 0 <= self.min_tokens <= max(self.max_tokens, 0):
            raise ValueError(f"min_tokens must be in 0..max_tokens ({self.max_tokens}), "
                             f"got {self.min_tokens}")
        if self.allowed_token_ids is not None and len(self.allowed_token_ids) == 0:
            raise ValueError("allowed_token_ids must not be empty (None: every id)")
        if self.bad_words is not None and (isinstance(self.bad_words, str) or
                                           not all(isinstance(w, str) and w for w in self.bad_words)):
            raise ValueError("bad_words must be a list of non-empty strings")
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
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not (math.isfinite(v) and -2.0 <= v <= 2.0):
                raise ValueError(f"{name} must be in [-2, 2] (0 = off), got {v}")
        r = self.repetition_penalty
        if not (math.isfinite(r) and 0.0 < r <= MAX_REPETITION_PENALTY):
            raise ValueError(
                f"repetition_penalty must be in (0, {MAX_REPETITION_PENALTY:g}] (1 = off), got {r}")
        _checked_logit_bias(self.logit_bias)

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
        s.presence_penalty = float(self.presence_penalty)
        s.frequency_penalty = float(self.frequency_penalty)
        s.repetition_penalty = float(self.repetition_penalty)
        s.logit_bias = [_core.LogitBias(t, b) for t, b in _checked_logit_bias(self.logit_bias)]
        r.sampling = s
        r.max_tokens = int(self.max_tokens)
        r.n = int(self.n)
        r.stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        r.stop_token_ids = [int(t) for t in (self.stop_token_ids or [])]
        r.ignore_eos = bool(self.ignore_eos)
        r.prompt_logprobs = -1 if self.prompt_logprobs is None else int(self.prompt_logprobs)
        r.return_routed_experts = bool(self.return_routed_experts)
        r.min_tokens = int(self.min_tokens)
        r.allowed_token_ids = [int(t) for t in (self.allowed_token_ids or [])]
        r.bad_words = list(self.bad_words or [])
        if self.structured_outputs is not None:
            self.structured_outputs._fill(r)
        return r


# field -> (its "off" value, why it is refused otherwise).
_UNSUPPORTED = {
    "logits_processors": (None, "arbitrary Python on the logits would break the bitwise "
                          "contract; use logit_bias, allowed_token_ids, bad_words or "
                          "structured_outputs"),
    "best_of": (None, "use n (every sample is returned, with its logprobs)"),
    "include_stop_str_in_output": (False, "the stop string is never part of the text"),
    "spaces_between_special_tokens": (True, "decoding is the tokenizer's own"),
    "truncate_prompt_tokens": (None, "prompts are never truncated; shorten them before"),
    "bad_words_ids": (None, "use bad_words (strings)"),
    "extra_args": (None, "there is no custom sampler to take them"),
    "detokenize": (True, "text always comes back (ignore it)"),
}


def _refuse_unsupported(sp: "SamplingParams") -> None:
    bad = []
    for name, (off, why) in _UNSUPPORTED.items():
        v = getattr(sp, name)
        if name == "best_of" and v in (None, sp.n):
            continue  # vLLM's default: best_of = n
        if v is not off and v != off:
            bad.append(f"  {name}={v!r}: not supported ({why})")
    if bad:
        raise ValueError("SamplingParams: fields detllm does not implement:\n" + "\n".join(bad))


def _checked_logit_bias(logit_bias: Optional[Mapping[int, float]]) -> list:
    """{token id: bias} -> [(id, bias)] by ascending id; ValueError naming a bad entry. Token
    ids are ints (or decimal strings, as OpenAI's JSON keys); the vocabulary is checked by the
    engine (detllm.Error)."""
    if logit_bias is None:
        return []
    if not isinstance(logit_bias, Mapping):
        raise ValueError(f"logit_bias must be a dict {{token id: bias}}, got {type(logit_bias).__name__}")
    if len(logit_bias) > MAX_LOGIT_BIAS:
        raise ValueError(f"logit_bias has {len(logit_bias)} entries; at most {MAX_LOGIT_BIAS} are accepted")
    out = {}
    for key, bias in logit_bias.items():
        if isinstance(key, str) and key.isdecimal():
            token = int(key)
        elif isinstance(key, int) and not isinstance(key, bool):
            token = key
        else:
            raise ValueError(f"logit_bias key {key!r} is not a token id")
        if not 0 <= token < 2**31:
            raise ValueError(f"logit_bias token id {token} is outside 0..{2**31 - 1}")
        if token in out:
            raise ValueError(f"logit_bias lists token id {token} twice")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)):
            raise ValueError(f"logit_bias[{token}] must be a number, got {type(bias).__name__}")
        if not (math.isfinite(bias) and -100.0 <= bias <= 100.0):
            raise ValueError(f"logit_bias[{token}] must be in [-100, 100], got {bias}")
        out[token] = float(bias)
    return sorted(out.items())
