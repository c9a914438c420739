"""Fixtures of the Python package's tests: one engine on the default model (CPU), shared by a
file's tests. The package is imported from python/ plus the built extension (PYTHONPATH set by
CTest, tests/CMakeLists.txt) or from an installed detllm."""

import pytest

import detllm


@pytest.fixture(scope="module")
def llm():
    return detllm.LLM(backend="cpu", mode="invariant")


def bits(a):
    """float32 values as their bit patterns, for exact comparison."""
    import numpy as np

    return np.asarray(a, dtype=np.float32).view(np.uint32)
