"""detllm: a deterministic LLM inference engine, from Python.

The API is shaped like vLLM's offline one (docs/python.md has the migration table)::

    import detllm
    llm = detllm.LLM()                                  # the embedded default model, CPU
    out = llm.generate(["The capital of France is"], detllm.SamplingParams(max_tokens=8))
    print(out[0].outputs[0].text, out[0].fingerprint)

Deterministic requests (the default) give the same fp32 bits whatever else runs in the batch;
``llm.score`` re-scores sequences with the same bits as generation reported, and
``detllm.torch.causal_lm_logprobs`` gives a trainer those bits with gradients.
"""

import pkgutil as _pkgutil

# The compiled module may sit in another directory of sys.path than these sources (a build
# tree: PYTHONPATH=python:<build>/python); an installed package has both in one place.
__path__ = _pkgutil.extend_path(__path__, __name__)

from ._core import Error  # noqa: E402  (engine errors: a RuntimeError with the engine's message)
from .llm import LLM  # noqa: E402
from .outputs import CompletionOutput, Logprob, RequestOutput, ScoreOutput  # noqa: E402
from .sampling_params import (  # noqa: E402
    GuidedDecodingParams,
    SamplingParams,
    StructuredOutputsParams,
)
from .tokenizer import Tokenizer  # noqa: E402

__all__ = [
    "LLM",
    "SamplingParams",
    "StructuredOutputsParams",
    "GuidedDecodingParams",
    "RequestOutput",
    "CompletionOutput",
    "ScoreOutput",
    "Logprob",
    "Tokenizer",
    "Error",
]
