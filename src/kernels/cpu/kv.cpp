// CPU kv_append: slot s holds (n_kv_heads, head_dim) floats at s * n_kv_heads * head_dim of
// cache.k and cache.v ([n_blocks, block_size, n_kv_heads, head_dim]). Exact copies, or with
// per-head scales (FP8 KV) each value rounded by ref::fp8_kv_round.
// Test: build/tests/test_kernels --gtest_filter='*Kv*'.
#include "kernels/cpu/kv.h"

#include <cstring>

#include "kernels/cpu/attention.h"
#include "kernels/ref/fp8_linear.h"

namespace detllm::kernels::cpu {

void kv_append(ThreadPool& pool, const float* k, const float* v, const StepBatch& batch,
               const KvCacheLayer& cache) {
  validate_step_batch(batch, cache, /*check_history=*/false);
  const int64_t row = static_cast<int64_t>(cache.n_kv_heads) * cache.head_dim;
  pool.parallel_for(
      batch.n_tokens,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t slot = batch.slots[t];
          if (cache.k_scale != nullptr) {  // FP8 KV: each value rounded once, here
            for (int64_t i = 0; i < row; ++i) {
              const int64_t h = i / cache.head_dim;
              cache.k_f32()[slot * row + i] = ref::fp8_kv_round(k[t * row + i], cache.k_scale[h]);
              cache.v_f32()[slot * row + i] = ref::fp8_kv_round(v[t * row + i], cache.v_scale[h]);
            }
            continue;
          }
          std::memcpy(cache.k_f32() + slot * row, k + t * row, sizeof(float) * row);
          std::memcpy(cache.v_f32() + slot * row, v + t * row, sizeof(float) * row);
        }
      },
      /*min_items_per_part=*/64);
}

}  // namespace detllm::kernels::cpu
