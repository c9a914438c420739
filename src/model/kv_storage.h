// Paged KV storage of a model in the backend's memory: for every layer, K and V pools of
// [n_blocks, block_size, n_kv_heads, head_dim] fp32. Which block belongs to which sequence is
// decided elsewhere (engine/kv_cache); this is only the memory.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"

namespace detllm {

class KvStorage {
 public:
  KvStorage(kernels::Ops& ops, const ModelConfig& config, int32_t n_blocks, int32_t block_size);

  int32_t n_blocks() const { return n_blocks_; }
  int32_t block_size() const { return block_size_; }
  kernels::KvCacheLayer layer(int32_t i) const;
  // Copies one physical block's K/V (every layer) to another (copy-on-write of shared blocks).
  void copy_block(int32_t src, int32_t dst);

 private:
  kernels::Ops& ops_;
  int32_t n_blocks_;
  int32_t block_size_;
  int32_t n_kv_heads_;
  int32_t head_dim_;
  std::vector<kernels::Buffer> k_;  // (n_layers) x [n_blocks, block_size, n_kv_heads, head_dim]
  std::vector<kernels::Buffer> v_;  // same
};

}  // namespace detllm
