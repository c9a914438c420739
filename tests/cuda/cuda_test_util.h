// Helpers of the GPU tests: skip without a GPU, device arrays through the Ops memory functions
// (so the tests need no CUDA headers), and a paged KV world on the device that runs attention
// schedules (chunks, batches, token orders, block layouts) and records each row's output.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "cuda/require_gpu.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/kernel_test_util.h"  // tests/kernels: shared with the CPU kernel tests
#include "kernels/ops.h"

namespace detllm::kernels::cuda_testing {

// The CPU kernel tests' helpers, shared rather than copied.
using testing::AttnShape;
using testing::Chunk;
using testing::first_bit_difference;
using testing::random_floats;

// DETLLM_SKIP_WITHOUT_GPU(): require_gpu.h (skips say why; DETLLM_REQUIRE_GPU=1 fails them).

// The KV dtype of the tests' CUDA backends: the backend's default (bf16), or fp32 when the
// environment says DETLLM_TEST_KV_DTYPE=fp32 (to run every GPU suite on the fp32 KV path).
inline DType test_kv_dtype() {
  const char* e = std::getenv("DETLLM_TEST_KV_DTYPE");
  if (e != nullptr && std::string_view(e) == "fp32") return DType::kF32;
  if (e != nullptr && std::string_view(e) != "bf16" && *e != 0)
    ADD_FAILURE() << "DETLLM_TEST_KV_DTYPE must be bf16 or fp32, not " << e;
  return CudaOptions{}.kv_dtype;
}

inline std::unique_ptr<Ops> invariant_ops(int attention_split_blocks = -1,
                                          DType kv_dtype = test_kv_dtype(),
                                          int attention_tc_warps = 0) {
  CudaOptions o;
  o.attention_split_blocks = attention_split_blocks;
  o.kv_dtype = kv_dtype;
  o.attention_tc_warps = attention_tc_warps;
  return make_cuda_ops(o);
}

inline std::unique_ptr<Ops> fast_ops() {
  CudaOptions o;
  o.mode = NumericsMode::kFast;
  o.kv_dtype = test_kv_dtype();
  return make_cuda_ops(o);
}

// The same for large arrays (xorshift, ~1 ns a value): weights of 8B-model shapes.
inline std::vector<float> fast_random_floats(size_t n, uint64_t seed, float lo = -1.0f,
                                             float hi = 1.0f) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = lo + (hi - lo) * static_cast<float>(s >> 40) * (1.0f / 16777216.0f);
  }
  return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  return h;
}

inline std::vector<float> round_bf16(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return r;
}

// Device memory owned through an Ops (RAII), with typed upload/download.
template <typename T>
class DeviceArray {
 public:
  DeviceArray(Ops& ops, size_t n) : ops_(&ops), n_(n), buf_(ops, n * sizeof(T)) {}
  DeviceArray(Ops& ops, const std::vector<T>& host) : DeviceArray(ops, host.size()) {
    upload(host);
  }
  void upload(const std::vector<T>& host) {
    ops_->upload(buf_.data(), host.data(), std::min(host.size(), n_) * sizeof(T));
  }
  std::vector<T> download(size_t n = SIZE_MAX) const {
    std::vector<T> h(std::min(n, n_));
    ops_->download(h.data(), buf_.data(), h.size() * sizeof(T));
    return h;
  }
  T* data() const { return buf_.data<T>(); }
  size_t size() const { return n_; }

 private:
  Ops* ops_;
  size_t n_;
  Buffer buf_;
};

// A paged KV cache in device memory, in the ops' KV dtype; q/k/v of (sequence, position) depend
// only on (content id, position), so the same sequence gives the same inputs in every run.
// Unwritten cache slots hold NaN: a kernel that reads past a row's position fails loudly.
class DevicePagedWorld {
 public:
  DevicePagedWorld(Ops& ops, const AttnShape& shape, std::vector<int> content_ids,
                   std::vector<int> lengths, uint32_t block_seed)
      : ops_(ops), shape_(shape), content_ids_(std::move(content_ids)),
        lengths_(std::move(lengths)) {
    const int n_seqs = static_cast<int>(lengths_.size());
    for (int len : lengths_)
      max_blocks_ = std::max(max_blocks_, (len + shape.block_size - 1) / shape.block_size);
    n_blocks_ = n_seqs * max_blocks_ + 3;
    std::vector<int32_t> ids(n_blocks_);
    std::iota(ids.begin(), ids.end(), 0);
    if (block_seed != 0) std::shuffle(ids.begin(), ids.end(), std::mt19937(block_seed));
    tables_.assign(static_cast<size_t>(n_seqs) * max_blocks_, -1);
    int next = 0;
    for (int s = 0; s < n_seqs; ++s)
      for (int b = 0; b < (lengths_[s] + shape.block_size - 1) / shape.block_size; ++b)
        tables_[static_cast<size_t>(s) * max_blocks_ + b] = ids[next++];
    const size_t floats =
        static_cast<size_t>(n_blocks_) * shape.block_size * shape.n_kv_heads * shape.head_dim;
    dtype_ = ops.kv_dtype();
    k_ = std::make_unique<Buffer>(ops, floats * dtype_size(dtype_));
    v_ = std::make_unique<Buffer>(ops, floats * dtype_size(dtype_));
    if (dtype_ == DType::kBF16) {
      const std::vector<uint16_t> nan(floats, uint16_t{0x7fc0});
      ops.upload(k_->data(), nan.data(), floats * 2);
      ops.upload(v_->data(), nan.data(), floats * 2);
    } else {
      const std::vector<float> nan(floats, std::numeric_limits<float>::quiet_NaN());
      ops.upload(k_->data(), nan.data(), floats * 4);
      ops.upload(v_->data(), nan.data(), floats * 4);
    }
    tables_dev_ = std::make_unique<DeviceArray<int32_t>>(ops, tables_);
  }

  // A prefix-cache hit: sequence dst's first n_blocks logical blocks become src's physical
  // ones (read-only from now on; dst must compute only positions ≥ n_blocks · block_size).
  void share_prefix(int dst, int src, int n_blocks) {
    for (int b = 0; b < n_blocks; ++b)
      tables_[static_cast<size_t>(dst) * max_blocks_ + b] =
          tables_[static_cast<size_t>(src) * max_blocks_ + b];
    tables_dev_->upload(tables_);
  }

  std::vector<float> content(int s, int p, int which) const {
    const int heads = which == 0 ? shape_.n_heads : shape_.n_kv_heads;
    const uint32_t seed = static_cast<uint32_t>(content_ids_[s]) * 1000003u +
                          static_cast<uint32_t>(p) * 7919u + static_cast<uint32_t>(which);
    const float amp = which == 0 ? 4.0f : 1.0f;
    return random_floats(static_cast<size_t>(heads) * shape_.head_dim, seed, -amp, amp);
  }

  // Runs one step (kv_append then attention) over the chunks' tokens in `order` (a permutation
  // of the step's tokens; empty = chunk order) and records each token's output row.
  void step(const std::vector<Chunk>& chunks, const std::vector<int>& order = {}) {
    std::vector<std::pair<int, int>> tokens;
    for (const Chunk& c : chunks)
      for (int i = 0; i < c.count; ++i) tokens.emplace_back(c.seq, c.start + i);
    if (!order.empty()) {
      std::vector<std::pair<int, int>> shuffled;
      for (int i : order) shuffled.push_back(tokens[i]);
      tokens = shuffled;
    }
    const int n = static_cast<int>(tokens.size());
    const int64_t q_row = row_floats();
    const int64_t kv_row = static_cast<int64_t>(shape_.n_kv_heads) * shape_.head_dim;
    std::vector<float> q(n * q_row), k(n * kv_row), v(n * kv_row);
    std::vector<int32_t> positions(n), seqs(n), slots(n);
    for (int t = 0; t < n; ++t) {
      const auto [s, p] = tokens[t];
      const auto qc = content(s, p, 0), kc = content(s, p, 1), vc = content(s, p, 2);
      std::copy(qc.begin(), qc.end(), q.begin() + t * q_row);
      std::copy(kc.begin(), kc.end(), k.begin() + t * kv_row);
      std::copy(vc.begin(), vc.end(), v.begin() + t * kv_row);
      positions[t] = p;
      seqs[t] = s;
      slots[t] = tables_[static_cast<size_t>(s) * max_blocks_ + p / shape_.block_size] *
                     shape_.block_size +
                 p % shape_.block_size;
    }
    DeviceArray<float> dq(ops_, q), dk(ops_, k), dv(ops_, v), dout(ops_, q.size());
    DeviceArray<int32_t> dpos(ops_, positions), dseq(ops_, seqs), dslots(ops_, slots);
    StepBatch batch{n,          dpos.data(), dseq.data(), dslots.data(),
                    static_cast<int32_t>(lengths_.size()), max_blocks_, tables_dev_->data()};
    const KvCacheLayer cache{k_->data(),        v_->data(),       n_blocks_, shape_.block_size,
                             shape_.n_kv_heads, shape_.head_dim, dtype_};
    ops_.kv_append(dk.data(), dv.data(), batch, cache);
    ops_.attention(dq.data(), cache, batch, shape_.n_heads, scale(), dout.data());
    const std::vector<float> out = dout.download();
    for (int t = 0; t < n; ++t)
      outputs_[tokens[t]] =
          std::vector<float>(out.begin() + t * q_row, out.begin() + (t + 1) * q_row);
  }

  float scale() const { return 1.0f / std::sqrt(static_cast<float>(shape_.head_dim)); }
  const std::vector<float>& output(int s, int p) const { return outputs_.at({s, p}); }
  int64_t row_floats() const { return static_cast<int64_t>(shape_.n_heads) * shape_.head_dim; }

 private:
  Ops& ops_;
  AttnShape shape_;
  std::vector<int> content_ids_;
  std::vector<int> lengths_;
  int max_blocks_ = 1;
  int n_blocks_ = 0;
  std::vector<int32_t> tables_;
  DType dtype_ = DType::kF32;
  std::unique_ptr<Buffer> k_, v_;  // [n_blocks, block_size, n_kv_heads, head_dim] of dtype_
  std::unique_ptr<DeviceArray<int32_t>> tables_dev_;
  std::map<std::pair<int, int>, std::vector<float>> outputs_;
};

}  // namespace detllm::kernels::cuda_testing
