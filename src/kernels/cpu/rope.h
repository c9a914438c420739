// CPU rotary embedding (half-split, HF rotate_half): tokens split across threads. The rotation
// uses no fma, so its bits equal the scalar reference's. Test: test_kernels
// --gtest_filter='*Rope*'.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace detllm::kernels::cpu {

// In place on x (n, n_heads, head_dim); positions (n); table.inv_freq (table.rot_dim / 2).
void rope(ThreadPool& pool, float* x, int32_t n, int32_t n_heads, int32_t head_dim,
          const int32_t* positions, const RopeTable& table);

}  // namespace detllm::kernels::cpu
