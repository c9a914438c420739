// The geometry half of cuda::AttentionArgs — the step's positions, sequences and block tables,
// the cache's shape, the output — taken from an Ops::attention call's arguments. The caller adds
// the KV pointers of the cache's dtype, q, and the launch options (PDL, bf16 output).
#pragma once

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/ops.h"

namespace detllm::kernels::cuda {

inline AttentionArgs attention_step_args(const float* q, const KvCacheLayer& cache,
                                         const StepBatch& batch, int32_t n_heads, float scale,
                                         float* out) {
  AttentionArgs a;
  a.q = q;
  a.positions = batch.positions;
  a.seq_of_token = batch.seq_of_token;
  a.block_tables = batch.block_tables;
  a.out = out;
  a.n_tokens = batch.n_tokens;
  a.n_heads = n_heads;
  a.n_kv_heads = cache.n_kv_heads;
  a.head_dim = cache.head_dim;
  a.block_size = cache.block_size;
  a.max_blocks = batch.max_blocks;
  a.n_blocks = cache.n_blocks;
  a.scale = scale;
  return a;
}

}  // namespace detllm::kernels::cuda
