// Paged KV storage (backend memory).
#include "model/kv_storage.h"

#include <algorithm>

#include "core/error.h"

namespace detllm {

KvStorage::KvStorage(kernels::Ops& ops, const ModelConfig& c, int32_t n_blocks, int32_t block_size,
                     int32_t n_pad_slots)
    : ops_(ops),
      n_blocks_(n_blocks),
      block_size_(block_size),
      n_pad_blocks_(block_size > 0 ? (std::max(n_pad_slots, 0) + block_size - 1) / block_size : 0),
      n_kv_heads_(c.n_kv_heads),
      head_dim_(c.head_dim) {
  check(n_blocks > 0 && block_size > 0, "KV storage needs n_blocks > 0 and block_size > 0");
  const size_t per_layer = static_cast<size_t>(n_blocks + n_pad_blocks_) * block_size *
                           c.n_kv_heads * c.head_dim * sizeof(float);
  for (int32_t i = 0; i < c.n_layers; ++i) {
    k_.emplace_back(ops, per_layer);
    v_.emplace_back(ops, per_layer);
  }
}

kernels::KvCacheLayer KvStorage::layer(int32_t i) const {
  return {k_.at(i).f32(), v_.at(i).f32(), n_blocks_ + n_pad_blocks_,
          block_size_,    n_kv_heads_,    head_dim_};
}

void KvStorage::copy_block(int32_t src, int32_t dst) {
  check(src >= 0 && src < n_blocks_ && dst >= 0 && dst < n_blocks_, "bad KV block copy {}→{}", src,
        dst);
  const size_t block = static_cast<size_t>(block_size_) * n_kv_heads_ * head_dim_;
  for (auto* pool : {&k_, &v_}) {
    for (auto& layer : *pool) {
      ops_.copy(layer.f32() + dst * block, layer.f32() + src * block, block * sizeof(float));
    }
  }
}

}  // namespace detllm
