// Appending K/V to a paged cache, fp32 or bf16: a bf16 cache rounds each value to bf16 (nearest
// even) once, here; attention only ever reads the cache, so KV computed in this step and KV
// cached earlier are the same bits (design.md Rule 2). One kernel for both element types.
// Tested by test_cuda --gtest_filter='CudaAttentionTc*:*BackendOps*'.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {
namespace {

__device__ inline void store(float* dst, float x) {
  *dst = x;
}
__device__ inline void store(__nv_bfloat16* dst, float x) {
  *dst = __float2bfloat16_rn(x);
}

template <typename T>
__global__ void kv_append_kernel(const float* k, const float* v, const int32_t* slots,
                                 int32_t n_tokens, int64_t row, int64_t n_slots, T* ck, T* cv) {
  const int64_t total = static_cast<int64_t>(n_tokens) * row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / row, e = i % row;
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= n_slots) continue;  // validated on the host side by the scheduler
    store(&ck[slot * row + e], k[i]);
    store(&cv[slot * row + e], v[i]);
  }
}

// One thread an element, grid-stride beyond 65535 blocks (the grid changes no bit: every
// element is written by one thread from its own inputs).
template <typename T>
cudaError_t launch(const float* k, const float* v, const int32_t* slots, int32_t n_tokens,
                   int64_t row, int64_t n_slots, T* cache_k, T* cache_v, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t total = static_cast<int64_t>(n_tokens) * row;
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535));
  kv_append_kernel<<<blocks, kThreads, 0, stream>>>(k, v, slots, n_tokens, row, n_slots, cache_k,
                                                    cache_v);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_kv_append(const float* k, const float* v, const int32_t* slots, int32_t n_tokens,
                             int64_t row, int64_t n_slots, float* cache_k, float* cache_v,
                             cudaStream_t stream) {
  return launch(k, v, slots, n_tokens, row, n_slots, cache_k, cache_v, stream);
}

cudaError_t launch_kv_append_bf16(const float* k, const float* v, const int32_t* slots,
                                  int32_t n_tokens, int64_t row, int64_t n_slots, uint16_t* cache_k,
                                  uint16_t* cache_v, cudaStream_t stream) {
  return launch(k, v, slots, n_tokens, row, n_slots, reinterpret_cast<__nv_bfloat16*>(cache_k),
                reinterpret_cast<__nv_bfloat16*>(cache_v), stream);
}

}  // namespace detllm::kernels::cuda
