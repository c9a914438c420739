// CPU matmul y = x·Wᵀ (+ bias): AVX2/FMA micro-kernels; threads split rows and output features,
// never the K-reduction, so every y[i, j] has one fixed operation sequence (see matmul.cpp).
// Test: build/tests/test_kernels --gtest_filter='*Matmul*'; bench: build/benchmarks/kernels_bench.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace detllm::kernels::cpu {

// y (m, w.rows) = x (m, w.cols) · wᵀ (+ bias (w.rows) when bias != nullptr).
// w.dtype: kF32, kBF16 or kF16 (widened exactly to fp32 in registers).
void matmul(ThreadPool& pool, const float* x, int32_t m, const WeightMatrix& w, const float* bias,
            float* y);

}  // namespace detllm::kernels::cpu
