// The q8-activation numerics class of the CPU backend (CpuActivations::kQ8, ops.h), defined
// here by plain scalar loops; kernels/cpu/matmul_q8.cpp computes exactly these bits with AVX2.
// Weights Q4_0, Q4_1 and Q8_0 only (32-element blocks); the activation row is quantized per
// 32-element block, the products are summed exactly in integers, and the fp32 part is one
// fixed sequence per output element, so y[i, j] depends on row i of x and row j of W only
// (not on m, the row's index, the tiling or the threads).
//
// Activations, per block of 32 (x_0 … x_31) of a row:
//   if some |x_e| is not <= FLT_MAX (inf or NaN):   d = NaN, q_e = 0
//   else amax = max |x_e|;  d = amax / 127;  if d < FLT_MIN:  d = 0, q_e = 0
//        else id = 1 / d;  q_e = round-half-even(x_e · id)   (in [-127, 127])
//   sum = Σ q_e (int32);  s = d · float(sum)
// Output y[i, j] over the blocks b = 0, 1, … of the row in order, acc = 0:
//   Q8_0: acc = fma(fl(dw_b · dx_b), float(Σ_e qw_e · qx_e), acc)
//   Q4_0: the same with qw_e = nibble_e − 8
//   Q4_1: acc = fma(fl(dw_b · dx_b), float(Σ_e nibble_e · qx_e), acc);  acc = fma(mw_b, s_b, acc)
//   y = acc, or fl(acc + bias[j])
// (dw, mw: the block's f16 scale and min, exact in fp32; the integer sums are exact and below
// 2^24, so their float conversion is exact.) This is the rounding llama.cpp's q8 dot products
// make, in one order of our own.
// Test: build/tests/test_kernels --gtest_filter='Q8Act*'.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace detllm::kernels::ref {

inline constexpr int64_t kQ8Block = 32;

// Whether w.dtype has a q8-activation kernel (Q4_0, Q4_1, Q8_0).
bool q8_act_weight_dtype(DType t);

// One row of k (a multiple of 32) activations quantized: q (k), d, s and sum (k / 32 each).
void quantize_row_q8_act(const float* x, int64_t k, int8_t* q, float* d, float* s, int32_t* sum);

// y (m, w.rows) = x (m, w.cols) · wᵀ (+ bias) by the definition above.
void matmul_q8_act(const float* x, int32_t m, const WeightMatrix& w, const float* bias, float* y);

}  // namespace detllm::kernels::ref
