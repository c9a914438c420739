// Logit penalties on the device: one thread per listed (row, token), each applying the one
// fp32 formula of kernels/sampling/logit_penalties.h (penalized_logit: __fadd_rn, __fmul_rn,
// __fdiv_rn, __fsub_rn, so no contraction) to its own element. No reduction and no element is
// written twice, so the result is the host's bits whatever the grid or the other rows.
// Test: build-cuda/tests/test_cuda --gtest_filter='CudaLogitPenalties*'
// (tests/cuda/cuda_logit_penalties_test.cpp).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/logit_penalties.h"
#include "kernels/sampling/logit_penalties.h"

namespace detllm::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void logit_penalties_kernel(float* __restrict__ logits, int32_t vocab,
                                       const LogitPenalty* __restrict__ entries, int32_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const LogitPenalty e = entries[i];
  float* x = logits + static_cast<int64_t>(e.row) * vocab + e.token;
  *x = ::detllm::penalty_math::penalized_logit(*x, e);
}

}  // namespace

cudaError_t launch_logit_penalties(float* logits, int32_t vocab, const LogitPenalty* entries,
                                   int32_t n, cudaStream_t stream) {
  if (n <= 0 || vocab <= 0) return cudaSuccess;
  const int blocks = (n + kThreads - 1) / kThreads;
  logit_penalties_kernel<<<blocks, kThreads, 0, stream>>>(logits, vocab, entries, n);
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda
