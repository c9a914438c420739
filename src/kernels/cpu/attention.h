// CPU causal attention over the paged KV cache (GQA): threads split (token, kv head) rows;
// each row reduces over 32-position tiles aligned to absolute position 0 (see attention.cpp).
// Test: build/tests/test_kernels --gtest_filter='*Attention*'; bench: build/benchmarks/kernels_bench.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace detllm::kernels::cpu {

// Positions per attention tile: part of the reduction grid, so changing it changes bits.
constexpr int32_t kAttentionTile = 32;

// q, out: (batch.n_tokens, n_heads, cache.head_dim); cache holds every position <= positions[t].
void attention(ThreadPool& pool, const float* q, const KvCacheLayer& cache, const StepBatch& batch,
               int32_t n_heads, float scale, float* out);

// Throws detllm::Error unless every token's metadata (sequence, position, block-table entries
// up to its position, slot) is in range for cache. Used by attention and kv_append.
void validate_step_batch(const StepBatch& batch, const KvCacheLayer& cache, bool check_history);

}  // namespace detllm::kernels::cpu
