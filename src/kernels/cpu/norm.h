// CPU RMSNorm: rows split across threads; each row's sum of squares has one fixed tree.
// Test: build/tests/test_kernels --gtest_filter='*Rmsnorm*'.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace detllm::kernels::cpu {

// out (n, dim) = x / sqrt(mean(x²) + eps) * w; x (n, dim), w (dim). out may alias x.
void rmsnorm(ThreadPool& pool, const float* x, const float* w, int32_t n, int32_t dim, float eps,
             float* out);

}  // namespace detllm::kernels::cpu
