// Appending K/V to a bf16 paged cache: each value rounded to bf16 (nearest even) once, here;
// attention only ever reads the cache, so KV computed in this step and KV cached earlier are
// the same bits (design.md Rule 2). Tested by test_cuda --gtest_filter='CudaAttentionTc*'.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {
namespace {

__global__ void kv_append_bf16_kernel(const float* k, const float* v, const int32_t* slots,
                                      int32_t n_tokens, int64_t row, int64_t n_slots,
                                      __nv_bfloat16* ck, __nv_bfloat16* cv) {
  const int64_t total = static_cast<int64_t>(n_tokens) * row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / row, e = i % row;
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= n_slots) continue;  // validated on the host side by the scheduler
    ck[slot * row + e] = __float2bfloat16_rn(k[i]);
    cv[slot * row + e] = __float2bfloat16_rn(v[i]);
  }
}

}  // namespace

cudaError_t launch_kv_append_bf16(const float* k, const float* v, const int32_t* slots,
                                  int32_t n_tokens, int64_t row, int64_t n_slots, uint16_t* cache_k,
                                  uint16_t* cache_v, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t total = static_cast<int64_t>(n_tokens) * row;
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535));
  kv_append_bf16_kernel<<<blocks, kThreads, 0, stream>>>(k, v, slots, n_tokens, row, n_slots,
                                                         reinterpret_cast<__nv_bfloat16*>(cache_k),
                                                         reinterpret_cast<__nv_bfloat16*>(cache_v));
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda
