// CPU matmul on FP8 weights (DType::kF8E4M3 / kF8E4M3B128 / kF8E4M3G128): the arithmetic of
// kernels/ref/fp8_linear.h with its bits — each x row quantized once per activation scheme
// (per 128-column group for kF8E4M3G128),
// then 8 output features in the 8 AVX lanes, each lane summing its own products k ascending
// (lanes are independent features, so no sum is reordered). Threads split output features.
// Test: build/tests/test_kernels --gtest_filter='Fp8*'.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace detllm::kernels::cpu {

// y (m, w.rows) = x (m, w.cols) · wᵀ (+ bias): the bits of ref::fp8_linear.
void matmul_fp8(ThreadPool& pool, const float* x, int32_t m, const WeightMatrix& w,
                const float* bias, float* y);

}  // namespace detllm::kernels::cpu
