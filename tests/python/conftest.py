"""Fixtures of the Python package's tests: one engine on the default model, shared by a file's
tests. The package is imported from python/ plus the built extension (PYTHONPATH set by
CTest, tests/CMakeLists.txt) or from an installed detllm.

Environment (the H200 runs of scripts/gpu/python_gpu.sh set them; CI sets none):
- DETLLM_TEST_BACKEND: the backend of the shared engine, "cpu" (default) or "cuda".
- DETLLM_TEST_KV_TOKENS: its KV pool in tokens (0, the default: the engine's own sizing; on a
  GPU the tests set it, so that torch, in the same process, keeps memory to allocate).
- DETLLM_DEFAULT_MODEL: the model (detllm.llm.default_model_path).
"""

import importlib.util
import os

import pytest

import detllm

TEST_BACKEND = os.environ.get("DETLLM_TEST_BACKEND", "cpu")
TEST_KV_TOKENS = int(os.environ.get("DETLLM_TEST_KV_TOKENS", "0"))


def make_llm(backend=None, **kw):
    """An engine for the tests: the chosen backend and KV size unless given."""
    kw.setdefault("kv_cache_tokens", TEST_KV_TOKENS)
    return detllm.LLM(backend=backend or TEST_BACKEND, mode="invariant", **kw)


@pytest.fixture(scope="module")
def llm():
    return make_llm()


def bits(a):
    """float32 values as their bit patterns, for exact comparison."""
    import numpy as np

    return np.asarray(a, dtype=np.float32).view(np.uint32)


def byte_tokenizer(n=256):
    """A tokenizer.json of the first n byte-level tokens (GPT-2's byte alphabet) and no merges,
    for the tiny checkpoints that have no tokenizer (their vocabulary is n ids; the tests give
    token ids, so any n-token one does)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return {"version": "1.0", "added_tokens": [],
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                              "use_regex": True},
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "vocab": {chars[b]: b for b in range(n)}, "merges": []}}


@pytest.fixture(scope="module")
def http_server():
    """The real `detllm serve` ($DETLLM_BIN) on the default model, for tests that compare a
    request from Python with the same request over HTTP. tests/e2e/conftest.py starts it; it is
    loaded under its own name (this directory has a conftest module of its own)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location(
        "e2e_conftest", os.path.join(root, "tests", "e2e", "conftest.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    s = mod.start_server()
    yield s
    assert s.stop() == 0, "".join(s.log)
