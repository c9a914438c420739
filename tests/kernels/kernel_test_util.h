// Shared helpers of the kernel tests, CPU and GPU (tests/cuda includes this header too):
// fixed-seed random data, bitwise comparison of fp32 buffers, backend memory through the Ops
// memory functions, and a paged KV "world" that runs attention schedules (which sequences,
// which chunks, which physical blocks, which token order) so tests can compare rows bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/ops.h"

namespace detllm::kernels::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Index of the first element whose bits differ, or -1 when all n are identical.
inline int64_t first_bit_difference(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) return i;
  return -1;
}

#define EXPECT_BITS_EQ(a, b, n)                                                         \
  do {                                                                                  \
    const int64_t diff_at_ = ::detllm::kernels::testing::first_bit_difference(a, b, n); \
    EXPECT_EQ(diff_at_, -1) << "first differing element " << diff_at_ << ": "           \
                            << (diff_at_ >= 0 ? (a)[diff_at_] : 0.0f) << " vs "         \
                            << (diff_at_ >= 0 ? (b)[diff_at_] : 0.0f);                  \
  } while (0)

// One step's slice of one sequence: tokens at positions [start, start + count).
struct Chunk {
  int seq = 0;
  int start = 0;
  int count = 0;
};

// Attention geometry of a test.
struct AttnShape {
  int32_t n_heads = 6;
  int32_t n_kv_heads = 2;
  int32_t head_dim = 64;
  int32_t block_size = 16;
};

inline void PrintTo(const AttnShape& s, std::ostream* os) {
  *os << "heads " << s.n_heads << "/" << s.n_kv_heads << " head_dim " << s.head_dim << " block "
      << s.block_size;
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

// Backend memory owned through an Ops (RAII), with typed upload/download: host memory for the
// CPU backends, device memory for CUDA, so one test body runs on every backend. The zero fill
// and the uploads are complete when the constructor and upload() return (the backend's own
// copies are asynchronous on its stream): tests hand the arrays to a second Ops, on another
// stream, which must not race them (a reference computed before the array was filled, then
// zeroed under it, once made CudaGemmLt.EveryMOfEveryBucketGivesTheKernelsBits fail).
template <typename T>
class DeviceArray {
 public:
  DeviceArray(Ops& ops, size_t n) : ops_(&ops), n_(n), buf_(ops, n * sizeof(T)) {
    ops.synchronize();
  }
  DeviceArray(Ops& ops, const std::vector<T>& host) : DeviceArray(ops, host.size()) {
    upload(host);
  }
  void upload(const std::vector<T>& host) {
    ops_->upload(buf_.data(), host.data(), std::min(host.size(), n_) * sizeof(T));
    ops_->synchronize();
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

// The memory of host backends (every host Ops allocates the same way): PagedWorld's default.
inline Ops& host_memory_ops() {
  static const std::unique_ptr<Ops> ops = make_ref_ops();
  return *ops;
}

// A paged KV cache in a backend's memory (the ops' KV dtype) plus the per-(sequence, position)
// q/k/v contents, which depend only on (content id of the sequence, position): the same
// sequence gives the same inputs in any run. Unwritten cache slots hold NaN: a kernel that
// reads past a row's position fails loudly. Shared by the CPU and the GPU tests.
class PagedWorld {
 public:
  // content_ids[s]: what sequence s holds; lengths[s]: its final length. block_seed permutes
  // the physical blocks each sequence gets (0 = identity layout). The cache lives in `memory`'s
  // memory; step() may run any ops that can read it (host ops for host memory).
  PagedWorld(Ops& memory, const AttnShape& shape, std::vector<int> content_ids,
             std::vector<int> lengths, uint32_t block_seed)
      : ops_(memory), shape_(shape), content_ids_(std::move(content_ids)),
        lengths_(std::move(lengths)) {
    const int n_seqs = static_cast<int>(lengths_.size());
    for (int len : lengths_)
      max_blocks_ = std::max(max_blocks_, (len + shape.block_size - 1) / shape.block_size);
    n_blocks_ = n_seqs * max_blocks_ + 3;  // a few spare blocks never used
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
    dtype_ = memory.kv_dtype();
    k_ = std::make_unique<Buffer>(memory, floats * dtype_size(dtype_));
    v_ = std::make_unique<Buffer>(memory, floats * dtype_size(dtype_));
    if (dtype_ == DType::kBF16) {
      const std::vector<uint16_t> nan(floats, uint16_t{0x7fc0});
      memory.upload(k_->data(), nan.data(), floats * 2);
      memory.upload(v_->data(), nan.data(), floats * 2);
    } else {
      const std::vector<float> nan(floats, std::numeric_limits<float>::quiet_NaN());
      memory.upload(k_->data(), nan.data(), floats * 4);
      memory.upload(v_->data(), nan.data(), floats * 4);
    }
    tables_dev_ = std::make_unique<DeviceArray<int32_t>>(memory, tables_);
  }
  // In host memory.
  PagedWorld(const AttnShape& shape, std::vector<int> content_ids, std::vector<int> lengths,
             uint32_t block_seed)
      : PagedWorld(host_memory_ops(), shape, std::move(content_ids), std::move(lengths),
                   block_seed) {}

  // A prefix-cache hit: sequence dst's first n_blocks logical blocks become src's physical
  // ones (read-only from now on; dst must compute only positions >= n_blocks * block_size).
  void share_prefix(int dst, int src, int n_blocks) {
    for (int b = 0; b < n_blocks; ++b)
      tables_[static_cast<size_t>(dst) * max_blocks_ + b] =
          tables_[static_cast<size_t>(src) * max_blocks_ + b];
    tables_dev_->upload(tables_);
  }

  // q, k or v (which = 0, 1, 2) of sequence s at position p: (heads, head_dim).
  std::vector<float> content(int s, int p, int which) const {
    const int heads = which == 0 ? shape_.n_heads : shape_.n_kv_heads;
    const uint32_t seed = static_cast<uint32_t>(content_ids_[s]) * 1000003u +
                          static_cast<uint32_t>(p) * 7919u + static_cast<uint32_t>(which);
    const float amp = which == 0 ? 4.0f : 1.0f;  // sharper softmax than uniform q would give
    return random_floats(static_cast<size_t>(heads) * shape_.head_dim, seed, -amp, amp);
  }

  // Runs one step on `ops`: the chunks' tokens in the given order (a permutation of all tokens
  // of the step; empty = chunk order). Writes KV, runs attention and records each token's
  // output. The one-argument form runs the ops whose memory holds the cache.
  void step(Ops& ops, const std::vector<Chunk>& chunks, const std::vector<int>& order = {}) {
    run_step(ops, chunks, order, false);
  }
  void step(const std::vector<Chunk>& chunks, const std::vector<int>& order = {}) {
    step(ops_, chunks, order);
  }
  // The same step with every token on a block-table row of its own (a copy of its sequence's):
  // the kernels see n_tokens sequences of one query each — how the engine verifies a window of
  // drafts as decode rows (ScheduledSeq::decode_rows) — rows of one chunk at consecutive
  // positions sharing its pages, their K/V appended in the same step.
  void step_rows(Ops& ops, const std::vector<Chunk>& chunks) { run_step(ops, chunks, {}, true); }
  void step_rows(const std::vector<Chunk>& chunks) { step_rows(ops_, chunks); }

 private:
  void run_step(Ops& ops, const std::vector<Chunk>& chunks, const std::vector<int>& order,
                bool rows_of_their_own) {
    std::vector<std::pair<int, int>> tokens;  // (seq, pos)
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
    int32_t n_table_rows = static_cast<int32_t>(lengths_.size());
    std::vector<int32_t> own_tables;  // rows_of_their_own: token t's table row is row t
    if (rows_of_their_own) {
      n_table_rows = n;
      for (int t = 0; t < n; ++t) {
        const auto row = tables_.begin() + static_cast<ptrdiff_t>(seqs[t]) * max_blocks_;
        own_tables.insert(own_tables.end(), row, row + max_blocks_);
        seqs[t] = t;
      }
    }
    DeviceArray<float> dq(ops_, q), dk(ops_, k), dv(ops_, v), dout(ops_, q.size());
    DeviceArray<int32_t> dpos(ops_, positions), dseq(ops_, seqs), dslots(ops_, slots);
    DeviceArray<int32_t> dtables(ops_, rows_of_their_own ? own_tables : std::vector<int32_t>{0});
    const StepBatch batch{n,           dpos.data(),
                          dseq.data(), dslots.data(),
                          n_table_rows, max_blocks_,
                          rows_of_their_own ? dtables.data() : tables_dev_->data()};
    ops.kv_append(dk.data(), dv.data(), batch, cache());
    ops.attention(dq.data(), cache(), batch, shape_.n_heads, scale(), dout.data());
    const std::vector<float> out = dout.download();
    for (int t = 0; t < n; ++t)
      outputs_[tokens[t]] =
          std::vector<float>(out.begin() + t * q_row, out.begin() + (t + 1) * q_row);
  }

 public:
  KvCacheLayer cache() const {
    return KvCacheLayer{k_->data(),        v_->data(),       n_blocks_, shape_.block_size,
                        shape_.n_kv_heads, shape_.head_dim, dtype_};
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
  std::vector<int32_t> tables_;  // (n_seqs, max_blocks) physical block ids
  DType dtype_ = DType::kF32;
  std::unique_ptr<Buffer> k_, v_;  // [n_blocks, block_size, n_kv_heads, head_dim] of dtype_
  std::unique_ptr<DeviceArray<int32_t>> tables_dev_;
  std::map<std::pair<int, int>, std::vector<float>> outputs_;  // (seq, pos) -> (heads*hd)
};

}  // namespace detllm::kernels::testing
