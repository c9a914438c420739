// The cross-backend op test (tests/kernels/backend_ops_test.cpp) with the CUDA backends: the
// same op table, the backends() of DETLLM_BACKEND_OPS_CUDA; every case skips without a GPU.
// Run: build-cuda/tests/test_cuda --gtest_filter='*BackendOps*'.
#define DETLLM_BACKEND_OPS_CUDA 1
#include "kernels/backend_ops_test.cpp"  // NOLINT(bugprone-suspicious-include)
