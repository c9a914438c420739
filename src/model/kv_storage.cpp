// Paged KV storage (backend memory).
#include "model/kv_storage.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/error.h"

namespace detllm {
namespace {
std::atomic<uint64_t> next_kv_storage_id{1};
}  // namespace

size_t KvStorage::element_bytes(DType dtype) {
  // An FP8 cache holds one E4M3 code an element (its scales are the model's, per layer and KV
  // head); dtype_size answers 2 for every non-fp32 type, which would give it a bf16 pool's bytes.
  return dtype_is_fp8(dtype) ? 1 : dtype_size(dtype);
}

KvStorage::KvStorage(kernels::Ops& ops, const ModelConfig& c, int32_t n_blocks, int32_t block_size,
                     int32_t n_pad_slots)
    : ops_(ops),
      id_(next_kv_storage_id.fetch_add(1)),
      n_blocks_(n_blocks),
      block_size_(block_size),
      n_pad_blocks_(block_size > 0 ? (std::max(n_pad_slots, 0) + block_size - 1) / block_size : 0),
      n_kv_heads_(c.n_kv_heads),
      head_dim_(c.head_dim),
      dtype_(ops.kv_dtype()) {
  check(n_blocks > 0 && block_size > 0, "KV storage needs n_blocks > 0 and block_size > 0");
  const size_t per_layer = static_cast<size_t>(n_blocks + n_pad_blocks_) * block_size *
                           c.n_kv_heads * c.head_dim * element_bytes(dtype_);
  for (int32_t i = 0; i < c.n_layers; ++i) {
    k_.emplace_back(ops, per_layer);
    v_.emplace_back(ops, per_layer);
  }
}

kernels::KvCacheLayer KvStorage::layer(int32_t i) const {
  return {k_.at(i).data(), v_.at(i).data(), n_blocks_ + n_pad_blocks_, block_size_,
          n_kv_heads_,     head_dim_,       dtype_};
}

void KvStorage::copy_block(int32_t src, int32_t dst) {
  check(src >= 0 && src < n_blocks_ && dst >= 0 && dst < n_blocks_, "bad KV block copy {}→{}", src,
        dst);
  const size_t block =
      static_cast<size_t>(block_size_) * n_kv_heads_ * head_dim_ * element_bytes(dtype_);
  for (auto* pool : {&k_, &v_}) {
    for (auto& layer : *pool) {
      char* base = layer.data<char>();
      ops_.copy(base + dst * block, base + src * block, block);
    }
  }
}

int32_t KvStorage::tokens_for_memory(const ModelConfig& c, DType dtype, size_t free_bytes,
                                     double fraction, int32_t block_size) {
  check(block_size > 0 && fraction > 0 && fraction <= 1, "bad KV sizing (block {}, fraction {})",
        block_size, fraction);
  const double budget = static_cast<double>(free_bytes) * fraction;
  const double per_block = static_cast<double>(bytes_per_token(c, dtype)) * block_size;
  const double blocks = std::min(std::floor(budget / per_block), double((1 << 26) / block_size));
  check(blocks >= 1,
        "KV cache: {:.0f} MiB free x fraction {} holds not one block of {} tokens ({:.1f} MiB); "
        "raise --gpu-memory-fraction or free device memory",
        static_cast<double>(free_bytes) / (1 << 20), fraction, block_size, per_block / (1 << 20));
  return static_cast<int32_t>(blocks) * block_size;
}

size_t KvStorage::bytes_per_token(const ModelConfig& c, DType dtype) {
  return size_t{2} * c.n_layers * c.n_kv_heads * c.head_dim * element_bytes(dtype);
}

}  // namespace detllm
