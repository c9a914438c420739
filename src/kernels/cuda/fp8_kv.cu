// The FP8 KV cache's append and its dequantizing read. Each K/V value is rounded once, when it
// is appended: code = e4m3(x / scale[h]) (one IEEE division, then the host codec's rounding,
// fp8_codec.cuh) with a scale fixed per (layer, KV head) — given by the caller, never computed
// from the batch — so a token's cached codes depend on its own K/V alone, and KV appended in
// this step and KV cached earlier are the same bits (as for the bf16 cache, kv_cache.cu). The
// read gives dec(code) · scale[h] in fp32 (one rounding of an exact product), a reference for
// tests: the attention reads the codes itself (attention_fp8_load.cuh), and the model's append
// is the fused q/k/v kernel's (fused.cu), with the same rounding (docs/cuda.md, "FP8").
// Test: test_cuda --gtest_filter='CudaFp8.Kv*' (= tests/cuda/fp8_reference.h).
#include <algorithm>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_codec.cuh"

namespace detllm::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t total) {
  return static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535));
}

// One thread an element, grid-stride (the grid changes no bit: every element is written by one
// thread from its own input).
__global__ void kv_append_fp8_kernel(const float* k, const float* v, const int32_t* slots,
                                     int32_t n_tokens, int32_t n_kv_heads, int32_t head_dim,
                                     int64_t n_slots, const float* k_scale, const float* v_scale,
                                     uint8_t* ck, uint8_t* cv) {
  const int64_t row = int64_t{n_kv_heads} * head_dim;
  const int64_t total = int64_t{n_tokens} * row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / row, e = i % row;
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= n_slots) continue;  // validated on the host side by the scheduler
    const int h = static_cast<int>(e / head_dim);
    ck[slot * row + e] = fp8::encode_e4m3(__fdiv_rn(k[i], k_scale[h]));
    cv[slot * row + e] = fp8::encode_e4m3(__fdiv_rn(v[i], v_scale[h]));
  }
}

__global__ void kv_read_fp8_kernel(const uint8_t* cache, const float* scale, const int32_t* slots,
                                   int32_t n, int32_t n_kv_heads, int32_t head_dim,
                                   int64_t n_slots, float* out) {
  const int64_t row = int64_t{n_kv_heads} * head_dim;
  const int64_t total = int64_t{n} * row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / row, e = i % row;
    const int64_t slot = slots[t];
    const int h = static_cast<int>(e / head_dim);
    out[i] = slot < 0 || slot >= n_slots
                 ? __int_as_float(0x7fc00000)  // a slot outside the cache reads as NaN
                 : __fmul_rn(fp8::decode_e4m3(cache[slot * row + e]), scale[h]);
  }
}

}  // namespace

cudaError_t launch_kv_append_fp8(const float* k, const float* v, const int32_t* slots,
                                 int32_t n_tokens, int32_t n_kv_heads, int32_t head_dim,
                                 int64_t n_slots, const float* k_scale, const float* v_scale,
                                 uint8_t* cache_k, uint8_t* cache_v, cudaStream_t stream) {
  if (n_tokens < 0 || n_kv_heads <= 0 || head_dim <= 0) return cudaErrorInvalidValue;
  if (n_tokens == 0) return cudaSuccess;
  kv_append_fp8_kernel<<<grid_for(int64_t{n_tokens} * n_kv_heads * head_dim), kThreads, 0,
                         stream>>>(k, v, slots, n_tokens, n_kv_heads, head_dim, n_slots, k_scale,
                                   v_scale, cache_k, cache_v);
  return cudaGetLastError();
}

cudaError_t launch_kv_read_fp8(const uint8_t* cache, const float* scale, const int32_t* slots,
                               int32_t n, int32_t n_kv_heads, int32_t head_dim, int64_t n_slots,
                               float* out, cudaStream_t stream) {
  if (n < 0 || n_kv_heads <= 0 || head_dim <= 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  kv_read_fp8_kernel<<<grid_for(int64_t{n} * n_kv_heads * head_dim), kThreads, 0, stream>>>(
      cache, scale, slots, n, n_kv_heads, head_dim, n_slots, out);
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda
