// CPU kv_append: copies this step's K/V rows into their cache slots (tokens split across
// threads; a copy, so exact). Test: build/tests/test_kernels --gtest_filter='*Kv*'.
#pragma once

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace detllm::kernels::cpu {

// k, v (batch.n_tokens, cache.n_kv_heads, cache.head_dim) -> cache slots batch.slots (n_tokens).
void kv_append(ThreadPool& pool, const float* k, const float* v, const StepBatch& batch,
               const KvCacheLayer& cache);

}  // namespace detllm::kernels::cpu
