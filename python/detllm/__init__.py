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

# The engine's names are imported on first use (PEP 562), not with the package: detllm.ray
# drives `detllm serve` processes over HTTP and must import where the compiled module is not
# built (a Ray worker, a router host). `detllm.LLM` and `from detllm import LLM` work as before.
_EXPORTS = {
    "Error": "._core",  # engine errors: a RuntimeError with the engine's message
    "LLM": ".llm",
    "CompletionOutput": ".outputs",
    "Logprob": ".outputs",
    "RequestOutput": ".outputs",
    "ScoreOutput": ".outputs",
    "GuidedDecodingParams": ".sampling_params",
    "SamplingParams": ".sampling_params",
    "StructuredOutputsParams": ".sampling_params",
    "Tokenizer": ".tokenizer",
}


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'detllm' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


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
