// The small-m GEMM's arithmetic, shared by its two schedules (gemv.cu: a ring per warp;
// gemv_stream.cu: a ring per CTA). A warp owns NT n8 tiles of output features and walks a
// stage of BK k: x as the A operand of mma.sync.m16n8k16 (16 rows, rows ≥ m zero), W as B,
// k16 steps ascending, fp32 accumulate — gemm.cu's instruction on the same fragments in the same
// order, so every schedule built on these gives its bits. One definition, so the schedules cannot
// drift apart.
//
// A configuration C provides: NT, BK, W_LD (bf16 elements between W rows in shared memory),
// X_ROW_BYTES (bytes between x rows), X_ELEM (4: fp32 x, rounded while building fragments; 2:
// bf16 x), A_F32 and M16 (m > 8: the A fragment's rows 8…15 are read too).
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/mma_ptx.cuh"

namespace detllm::kernels::cuda::gemv {

// sm_90's opt-in shared memory per block: the most either schedule's ring may take.
constexpr size_t kMaxSmem = 227 * 1024;

// The A fragment word of x row `row`, columns col, col + 1, as bf16 (zero for rows ≥ m).
template <class C>
__device__ __forceinline__ uint32_t x_word(const unsigned char* xs, int row, int col, int m) {
  if (row >= m) return 0u;
  const unsigned char* at = xs + row * C::X_ROW_BYTES + col * C::X_ELEM;
  if constexpr (C::A_F32) {
    const float2 v = *reinterpret_cast<const float2*>(at);
    return ptx::pack_bf16(v.x, v.y);
  } else {
    return *reinterpret_cast<const uint32_t*>(at);
  }
}

// The A fragment of the k16 step at stage column kk.
template <class C>
__device__ __forceinline__ void a_fragment(uint32_t (&a)[4], const unsigned char* xs, int kk,
                                           int lane, int m) {
  const int g = lane >> 2, c = kk + 2 * (lane & 3);
  a[0] = x_word<C>(xs, g, c, m);
  a[2] = x_word<C>(xs, g, c + 8, m);
  a[1] = C::M16 ? x_word<C>(xs, g + 8, c, m) : 0u;
  a[3] = C::M16 ? x_word<C>(xs, g + 8, c + 8, m) : 0u;
}

// `steps` k16 steps of one stage: ws = the warp's first W row (8·NT rows of W_LD), xs = the
// stage's x rows, into the NT accumulators.
template <class C>
__device__ __forceinline__ void compute_stage(const uint16_t* ws, const unsigned char* xs,
                                              int steps, int lane, int m,
                                              float (&acc)[C::NT][4]) {
  if constexpr (C::NT == 1) {
    // One ldmatrix.x4 gives the B fragments of two k-steps: rows 0…7 at kk, kk+8, kk+16, kk+24.
#pragma unroll
    for (int kk = 0; kk < C::BK; kk += 32) {
      if (kk / 16 >= steps) break;
      uint32_t b[4];
      ptx::ldmatrix_x4(b, ws + (lane & 7) * C::W_LD + kk + (lane >> 3) * 8);
      uint32_t a[4];
      a_fragment<C>(a, xs, kk, lane, m);
      ptx::mma_bf16(acc[0], a, b[0], b[1]);
      if (kk / 16 + 1 < steps) {
        a_fragment<C>(a, xs, kk + 16, lane, m);
        ptx::mma_bf16(acc[0], a, b[2], b[3]);
      }
    }
  } else {
    static_assert(C::NT == 2, "8 or 16 output features per warp");
#pragma unroll
    for (int kk = 0; kk < C::BK; kk += 16) {
      if (kk / 16 >= steps) break;
      // Rows 0…7 at kk, kk+8 (tile 0), rows 8…15 at kk, kk+8 (tile 1), as gemm.cu's B loads.
      uint32_t b[4];
      ptx::ldmatrix_x4(b,
                       ws + ((lane >> 4) * 8 + (lane & 7)) * C::W_LD + kk + ((lane >> 3) & 1) * 8);
      uint32_t a[4];
      a_fragment<C>(a, xs, kk, lane, m);
      ptx::mma_bf16(acc[0], a, b[0], b[1]);
      ptx::mma_bf16(acc[1], a, b[2], b[3]);
    }
  }
}

template <int NT>
__device__ __forceinline__ void zero(float (&acc)[NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
}

// y[row, n0 + …] (rows ld apart) = acc (+ bias, __fadd_rn as gemm.cu's epilogue) for rows < m,
// columns < col_end.
template <int NT>
__device__ __forceinline__ void store(const float (&acc)[NT][4], float* y, int ld,
                                      const float* bias, int m, int col_end, int n0, int lane) {
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = g + (e >= 2 ? 8 : 0);
      const int col = n0 + j * 8 + 2 * tq + (e & 1);
      if (row < m && col < col_end) {
        float v = acc[j][e];
        if (bias != nullptr) v = __fadd_rn(v, bias[col]);
        y[int64_t{row} * ld + col] = v;
      }
    }
}

}  // namespace detllm::kernels::cuda::gemv
