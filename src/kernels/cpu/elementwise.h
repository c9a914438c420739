// CPU elementwise ops (silu_mul, add, embedding): element i depends on input element i only,
// so any split across threads gives the same bits. Test: test_kernels
// --gtest_filter='*Elementwise*'.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace detllm::kernels::cpu {

// out[i] = gate[i] / (1 + exp8(-gate[i])) * up[i] for i < n; gate, up, out (n).
void silu_mul(ThreadPool& pool, const float* gate, const float* up, int64_t n, float* out);

// x[i] += y[i] for i < n; x, y (n).
void add(ThreadPool& pool, float* x, const float* y, int64_t n);

// out (n, table.cols) = table[ids[i], :] widened to fp32; table (vocab = rows, dim = cols).
void embedding(ThreadPool& pool, const WeightMatrix& table, const int32_t* ids, int32_t n,
               float* out);

}  // namespace detllm::kernels::cpu
