// Token masks on the device (cuda_kernels.h): the masked copy of the sampling rows and the
// scoring rows of the drawn tokens. Test: build/tests/test_cuda
// --gtest_filter='*BackendOps*sample_rows_masked*:CudaMaskedSampling*'.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/sampling/sample_row.h"

namespace detllm::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One thread an element; a warp's 32 elements share one mask word (one load, broadcast).
__global__ void mask_rows_kernel(const float* __restrict__ logits, int32_t vocab,
                                 const int32_t* __restrict__ mask_of_row,
                                 const uint32_t* __restrict__ words, float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= vocab) return;
  const int64_t r = blockIdx.y;
  const int64_t at = r * vocab + i;
  const int32_t m = mask_of_row[r];
  bool allowed = true;
  if (m >= 0) {
    const int64_t n_words = (static_cast<int64_t>(vocab) + 31) / 32;
    allowed = ((words[m * n_words + i / 32] >> (i % 32)) & 1u) != 0;
  }
  out[at] = allowed ? logits[at] : -__int_as_float(0x7f800000);
}

__global__ void scoring_params_kernel(const SampleRowParams* __restrict__ params,
                                      const SampleRowResult* __restrict__ drawn,
                                      const int32_t* __restrict__ mask_of_row, int32_t rows,
                                      SampleRowParams* __restrict__ out) {
  const int32_t r = static_cast<int32_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (r >= rows) return;
  const SampleRowParams p = params[r];
  SampleRowParams s;
  s.temperature = 0.0f;
  s.top_k = 0;
  s.top_p = 1.0f;
  s.min_p = 0.0f;
  s.seed = p.seed;
  s.position = p.position;
  s.sample_index = p.sample_index;
  s.n_logprobs = mask_of_row[r] >= 0 ? p.n_logprobs : 0;
  s.score_token = drawn[r].status == SampleRowStatus::kOk ? drawn[r].token : -1;
  out[r] = s;
}

}  // namespace

cudaError_t launch_mask_rows(const float* logits, int32_t rows, int32_t vocab,
                             const int32_t* mask_of_row, const uint32_t* words, float* out,
                             cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((vocab + kThreads - 1) / kThreads),
                  static_cast<unsigned>(rows));
  mask_rows_kernel<<<grid, kThreads, 0, stream>>>(logits, vocab, mask_of_row, words, out);
  return cudaGetLastError();
}

cudaError_t launch_scoring_params(const SampleRowParams* params, const SampleRowResult* drawn,
                                  const int32_t* mask_of_row, int32_t rows, SampleRowParams* out,
                                  cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  scoring_params_kernel<<<(rows + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      params, drawn, mask_of_row, rows, out);
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda
