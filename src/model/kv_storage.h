// Paged KV storage of a model in the backend's memory: for every layer, K and V pools of
// [n_blocks, block_size, n_kv_heads, head_dim] in the backend's KV dtype (Ops::kv_dtype():
// fp32 on the CPU, bf16 by default on CUDA). Which block belongs to which sequence is
// decided elsewhere (engine/kv_cache); this is only the memory. Optional pad blocks after the
// n_blocks usable ones take the K/V of padded decode rows (model/step_padding.h); no sequence
// ever maps them.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"

namespace detllm {

class KvStorage {
 public:
  // n_pad_slots: slots reserved for pad rows (rounded up to whole blocks), 0 = none.
  KvStorage(kernels::Ops& ops, const ModelConfig& config, int32_t n_blocks, int32_t block_size,
            int32_t n_pad_slots = 0);

  int32_t n_blocks() const { return n_blocks_; }  // usable blocks 0 … n_blocks - 1
  // Unique in the process (a tensor-parallel group keys its ranks' storages by it).
  uint64_t id() const { return id_; }
  int32_t block_size() const { return block_size_; }
  int32_t n_layers() const { return static_cast<int32_t>(k_.size()); }
  DType dtype() const { return dtype_; }
  // Bytes of one K or V element in a pool of `dtype`: 4 (fp32), 2 (bf16), 1 (FP8 E4M3 codes).
  static size_t element_bytes(DType dtype);
  // Bytes of K + V of one position in every layer (sizes the pool from free memory).
  static size_t bytes_per_token(const ModelConfig& config, DType dtype);
  // KV pool capacity in tokens (whole blocks) that fits `fraction` of `free_bytes`, capped at
  // 2^26 tokens; throws detllm::Error, saying what to do, when not even one block fits.
  static int32_t tokens_for_memory(const ModelConfig& config, DType dtype, size_t free_bytes,
                                   double fraction, int32_t block_size);
  int32_t pad_block() const { return n_blocks_; }  // first pad block
  int32_t n_pad_slots() const { return n_pad_blocks_ * block_size_; }
  // The layer's pools, pad blocks included (KvCacheLayer::n_blocks = n_blocks + pad blocks).
  kernels::KvCacheLayer layer(int32_t i) const;
  // Copies one physical block's K/V (every layer) to another (copy-on-write of shared blocks).
  void copy_block(int32_t src, int32_t dst);

 private:
  kernels::Ops& ops_;
  uint64_t id_;
  int32_t n_blocks_;
  int32_t block_size_;
  int32_t n_pad_blocks_;
  int32_t n_kv_heads_;
  int32_t head_dim_;
  DType dtype_;
  std::vector<kernels::Buffer> k_;  // (n_layers) x [n_blocks + pad, block_size, kv_heads, hd]
  std::vector<kernels::Buffer> v_;  // same
};

}  // namespace detllm
