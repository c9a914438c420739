// The per-token FP8 activation rule on the device, in one place for the two kinds of kernel that
// apply it: the FP8 linear's own quantizer (fp8_quant.cu) and the producers of a GEMM input
// that quantize the rows they have just rounded to bf16 (fused.cu: add_rmsnorm, silu_mul_rows).
// A row's scale is the checkpoint's static input scale when it has one, else
// min(amax, bound) / 448 (bound when > 0; 1 when that is 0) over the row's values, NaN ignored;
// its codes are e4m3(x / scale) (one IEEE division, fp8_codec.cuh's rounding). The amax is a
// max — exact and order-free — so which threads reduce it, and in which tree, moves no bit:
// the fused producers give the quantizer's bits (tests/cuda/cuda_fp8_fused_test.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_codec.cuh"

namespace detllm::kernels::cuda::fp8 {

// A matrix's activation parameters (kernels/fp8_device_matrix.h): params nullptr, or
// {input_scale, act_bound} in device memory.
struct RowRule {
  float input_scale = 0.0f;  // > 0: every row's scale
  float bound = 0.0f;        // > 0: caps the amax (fbgemm's activation_scale_ub)
  __device__ bool is_static() const { return input_scale > 0.0f; }
};

__device__ __forceinline__ RowRule row_rule(const float* params) {
  return params ? RowRule{params[0], params[1]} : RowRule{};
}

// The scale of a row of amax `amax` (already NaN-free: fmaxf drops NaN operands).
__device__ __forceinline__ float row_scale(const RowRule& r, float amax) {
  if (r.is_static()) return r.input_scale;
  const float m = r.bound > 0.0f ? fminf(amax, r.bound) : amax;
  const float s = __fdiv_rn(m, kE4m3Max);
  return s == 0.0f ? 1.0f : s;  // an all-zero row, or an amax below 448 · 2^-149
}

// The max over the block's threads (WARPS warps) of each thread's `v`; every thread gets it.
// warp_max: WARPS floats of shared memory, not otherwise in use across this call.
template <int WARPS>
__device__ __forceinline__ float block_max(float v, float* warp_max) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = warp_max[0];
#pragma unroll
  for (int w = 1; w < WARPS; ++w) m = fmaxf(m, warp_max[w]);
  return m;
}

// The scale of a row whose threads (WARPS warps) each hold the amax of their elements: the
// static scale, or row_scale of the block's max. Every thread of the block calls it (a block
// barrier unless the rule is static, which is the same for every thread).
template <int WARPS>
__device__ __forceinline__ float block_row_scale(const RowRule& r, float amax, float* warp_max) {
  return row_scale(r, r.is_static() ? 0.0f : block_max<WARPS>(amax, warp_max));
}

__device__ __forceinline__ uint8_t row_code(float x, float scale) {
  return encode_e4m3(__fdiv_rn(x, scale));
}

}  // namespace detllm::kernels::cuda::fp8
