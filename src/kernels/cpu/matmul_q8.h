// CPU matmul in the q8-activation numerics class (CpuActivations::kQ8): x is quantized per
// 32-element block to int8, each block's products with Q4_0 / Q4_1 / Q8_0 weights are summed
// exactly in int32 (AVX2 maddubs), and the fp32 part runs the one sequence per output element
// that kernels/ref/q8_act_ref.h defines, with 8 output columns in the 8 lanes. So y[i, j] has
// the reference's bits for every m, row index, tile and thread count.
// Test: build/tests/test_kernels --gtest_filter='Q8Act*'; bench: kernels_bench --only=quant.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace detllm::kernels::cpu {

// One row of k (a multiple of 32) activations quantized, with the bits of
// ref::quantize_row_q8_act: q (k), d, s and sum (k / 32 each).
void quantize_row_q8_act(const float* x, int64_t k, int8_t* q, float* d, float* s, int32_t* sum);

// y (m, w.rows) = x (m, w.cols) · wᵀ (+ bias), w.dtype Q4_0, Q4_1 or Q8_0: the bits of
// ref::matmul_q8_act.
void matmul_q8(ThreadPool& pool, const float* x, int32_t m, const WeightMatrix& w,
               const float* bias, float* y);

}  // namespace detllm::kernels::cpu
