// Synthetic weights generated in device memory (Ops::fill_uniform): the formula of
// kernels/synthetic_values.h, bit for bit — integer splitmix64, an exact int→float conversion
// and power-of-two scaling, then the two float roundings pinned with __fmul_rn/__fadd_rn so
// nvcc cannot contract them into an FMA (the host builds with -ffp-contract=off); bf16 output
// rounds to nearest even exactly like f32_to_bf16 (core/dtype.h), the host's upload conversion.
// Test: build-cuda/tests/test_cuda --gtest_filter='CudaSynthetic*'.
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ inline float value(uint64_t key, uint64_t i, float center, float scale) {
  const uint64_t r = mix(key + i);
  // r >> 40 has 24 bits: the conversion and the scaling by 2^-24 are exact.
  const float u = __fmul_rn(__ull2float_rn(r >> 40), 5.9604644775390625e-8f);
  return __fadd_rn(center, __fmul_rn(scale, __fsub_rn(__fmul_rn(2.0f, u), 1.0f)));
}

// f32_to_bf16 of core/dtype.h: round to nearest even, NaN kept quiet.
__device__ inline uint16_t to_bf16_bits(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__global__ void fill_f32_kernel(float* dst, int64_t n, uint64_t key, float center, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = value(key, static_cast<uint64_t>(i), center, scale);
  }
}

__global__ void fill_bf16_kernel(uint16_t* dst, int64_t n, uint64_t key, float center,
                                 float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = to_bf16_bits(value(key, static_cast<uint64_t>(i), center, scale));
  }
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 16 ? 65535 * 16 : blocks));
}

}  // namespace

cudaError_t launch_fill_uniform(void* dst, bool is_bf16, int64_t n, uint64_t key, float center,
                                float scale, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (is_bf16) {
    fill_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<uint16_t*>(dst), n, key,
                                                           center, scale);
  } else {
    fill_f32_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<float*>(dst), n, key, center,
                                                          scale);
  }
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda
