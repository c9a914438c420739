// The one sum-of-squares tree of the CUDA RMSNorms (elementwise.cu's rmsnorm, fused.cu's
// add_rmsnorm and the q/k head norms of qkv_rope_append): a row reduced as if by 256 threads,
// thread i holding the fma-chain of x[d]² for d ≡ i (mod 256) in ascending d, then a xor
// butterfly in each warp (offsets 16 … 1), then a xor butterfly (offsets 4, 2, 1) over the 8
// warp sums. Every kernel that normalizes a row reduces it through this code, so a row's bits
// do not depend on which kernel (or how many rows, or which layout) did it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace detllm::kernels::cuda {

constexpr int kNormThreads = 256;
constexpr int kNormWarps = kNormThreads / 32;

// A warp's xor butterfly: every lane ends with the same value (fp addition is commutative).
__device__ inline float warp_butterfly_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// The butterfly over the 8 warp sums (as lanes 0…7, xor 4, 2, 1) written out: s[w] for w < 8.
__device__ inline float warp_sums_total(const float (&s)[kNormWarps]) {
  const float a0 = __fadd_rn(s[0], s[4]), a1 = __fadd_rn(s[1], s[5]);
  const float a2 = __fadd_rn(s[2], s[6]), a3 = __fadd_rn(s[3], s[7]);
  return __fadd_rn(__fadd_rn(a0, a2), __fadd_rn(a1, a3));
}

// Block version (blockDim.x == kNormThreads): ss is the thread's partial; every thread gets
// the total. warp_sums: kNormWarps floats of shared memory.
__device__ inline float block_sum_squares(float ss, float* warp_sums) {
  ss = warp_butterfly_sum(ss);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = ss;
  __syncthreads();
  float s[kNormWarps];
#pragma unroll
  for (int w = 0; w < kNormWarps; ++w) s[w] = warp_sums[w];
  return warp_sums_total(s);
}

// A row held in registers: thread i keeps its elements d = i + 256 j (j < PER, d < dim), so
// every load of the row is in flight at once instead of one dependent load a loop trip (a
// batch-1 add_rmsnorm spent 8–15 µs on one SM walking 16 trips, Nsight Compute, 2026-12-03).
// The chain is the same — ascending j is ascending d — so the bits are the loop's (tests:
// CudaFusedOps.RowInRegistersEqualsTheLoop). PER is 4, 8, 16 or 32 (rows up to 8192); 0 for
// longer rows, which keep the loop.
constexpr int kRowRegsMax = 32;
inline int row_regs_for(int dim) {
  const int per = (dim + kNormThreads - 1) / kNormThreads;
  if (per > kRowRegsMax) return 0;
  return per <= 4 ? 4 : per <= 8 ? 8 : per <= 16 ? 16 : 32;
}

// Host: launch(std::integral_constant<int, PER>{}) for a launcher's row_regs (-1: row_regs_for
// dim, 0: the loop, 4/8/16/32 forced); cudaErrorInvalidValue for another count or one too
// small for dim.
template <class Launch>
cudaError_t with_row_regs(int row_regs, int dim, Launch&& launch) {
  if (row_regs > 0 && int64_t{row_regs} * kNormThreads < dim) return cudaErrorInvalidValue;
  switch (row_regs < 0 ? row_regs_for(dim) : row_regs) {
    case 0:
      return launch(std::integral_constant<int, 0>{});
    case 4:
      return launch(std::integral_constant<int, 4>{});
    case 8:
      return launch(std::integral_constant<int, 8>{});
    case 16:
      return launch(std::integral_constant<int, 16>{});
    case 32:
      return launch(std::integral_constant<int, 32>{});
    default:
      return cudaErrorInvalidValue;
  }
}

// Thread i's elements of a row in registers: v[j] = x[d] (+ y[d], one rounding, when ADD), g[j]
// = w[d] for d = i + 256 j < dim, zeros past it; every load issued before any is used.
template <int PER, bool ADD>
__device__ __forceinline__ void load_row_regs(const float* x, const float* y, const float* w,
                                              int32_t dim, float (&v)[PER], float (&g)[PER]) {
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int32_t d = threadIdx.x + j * kNormThreads;
    v[j] = 0.0f;
    g[j] = 0.0f;
    if (d < dim) {
      v[j] = x[d];
      if constexpr (ADD) v[j] = __fadd_rn(v[j], y[d]);
      g[j] = w[d];
    }
  }
}

// The thread's fma chain of x[d]² over its register elements, ascending d: the loop's chain.
template <int PER>
__device__ __forceinline__ float regs_sum_squares(const float (&v)[PER], int32_t dim) {
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < PER; ++j)
    if (threadIdx.x + j * kNormThreads < dim) ss = __fmaf_rn(v[j], v[j], ss);
  return ss;
}

// 1 / sqrt(mean + eps), rounded step by step.
__device__ inline float rms_scale(float total, int dim, float eps) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(total, static_cast<float>(dim)), eps)));
}

}  // namespace detllm::kernels::cuda
