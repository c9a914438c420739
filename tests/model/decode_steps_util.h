// Test helper shared by tests/model/padded_forward_test.cpp (CPU) and
// tests/cuda/cuda_graph_test.cpp (GPU): a set of sequences on a shuffled paged KV layout that
// builds model steps — a whole-prompt prefill, or a decode step over any subset of the
// sequences in any row order — and a runner that executes every step twice, eagerly
// (GraphMode::kOff) and padded (kOn: graph replay on CUDA), each on its own KvStorage, and
// compares the logits bit for bit (V8).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"
#include "model/step_padding.h"

namespace detllm::testing {

// One step's host metadata (kernels::StepBatch layout).
struct TestStep {
  std::vector<int32_t> tokens, positions, seq_of_token, slots, tables, logit_rows;
  int32_t n_seqs = 0, max_blocks = 0;
  kernels::StepBatch batch() const {
    kernels::StepBatch b;
    b.n_tokens = static_cast<int32_t>(tokens.size());
    b.positions = positions.data();
    b.seq_of_token = seq_of_token.data();
    b.slots = slots.data();
    b.n_seqs = n_seqs;
    b.max_blocks = max_blocks;
    b.block_tables = tables.data();
    return b;
  }
};

class DecodeWorld {
 public:
  // n_seqs sequences of at most max_len tokens; physical blocks shuffled from a pool of
  // n_blocks() blocks.
  DecodeWorld(int32_t n_seqs, int32_t max_len, int32_t block_size, int32_t vocab, uint64_t seed)
      : block_size_(block_size), vocab_(vocab), rng_(seed), len_(n_seqs, 0) {
    const int32_t per_seq = (max_len + block_size - 1) / block_size;
    std::vector<int32_t> ids(static_cast<size_t>(per_seq) * n_seqs);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    for (int32_t s = 0; s < n_seqs; ++s)
      blocks_.emplace_back(ids.begin() + s * per_seq, ids.begin() + (s + 1) * per_seq);
    n_blocks_ = static_cast<int32_t>(ids.size());
    max_len_ = per_seq * block_size;
  }
  int32_t n_blocks() const { return n_blocks_; }
  int32_t len(int32_t s) const { return len_[s]; }

  // The next `n` tokens of each sequence in `seqs` (in that row order), every row's logits.
  TestStep step(const std::vector<int32_t>& seqs, int32_t n = 1) {
    TestStep st;
    st.n_seqs = static_cast<int32_t>(seqs.size());
    for (int32_t s : seqs)
      st.max_blocks = std::max(st.max_blocks, (len_[s] + n - 1) / block_size_ + 1);
    st.tables.assign(static_cast<size_t>(st.n_seqs) * st.max_blocks, -1);
    for (int32_t r = 0; r < st.n_seqs; ++r) {
      const int32_t s = seqs[r];
      EXPECT_LE(len_[s] + n, max_len_);
      for (int32_t b = 0; b < st.max_blocks; ++b) st.tables[r * st.max_blocks + b] = blocks_[s][b];
      for (int32_t i = 0; i < n; ++i) {
        const int32_t p = len_[s] + i;
        st.logit_rows.push_back(static_cast<int32_t>(st.tokens.size()));
        st.tokens.push_back(static_cast<int32_t>(rng_() % static_cast<uint32_t>(vocab_)));
        st.positions.push_back(p);
        st.seq_of_token.push_back(r);
        st.slots.push_back(blocks_[s][p / block_size_] * block_size_ + p % block_size_);
      }
      len_[s] += n;
    }
    return st;
  }
  // A random subset of k sequences in random order.
  std::vector<int32_t> pick(int32_t k) {
    std::vector<int32_t> all(len_.size());
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng_);
    all.resize(static_cast<size_t>(k));
    return all;
  }

 private:
  int32_t block_size_, vocab_, n_blocks_ = 0, max_len_ = 0;
  std::mt19937 rng_;
  std::vector<int32_t> len_;
  std::vector<std::vector<int32_t>> blocks_;
};

// Runs each step eagerly on kv_eager and padded on kv_padded; logits must be equal bits.
class EagerVsPadded {
 public:
  EagerVsPadded(const LlamaModel& model, const DecodeWorld& world, int32_t block_size)
      : model_(model),
        eager_(model.ops(), model.config(), world.n_blocks(), block_size, 0),
        padded_(model.ops(), model.config(), world.n_blocks(), block_size, max_pad_rows()) {}

  // Returns the padded run's logits (after checking them against the eager run's).
  std::vector<float> run(const TestStep& st, const std::string& what) {
    std::vector<float> a, b;
    model_.forward(st.tokens, st.batch(), st.logit_rows, eager_, a, GraphMode::kOff);
    model_.forward(st.tokens, st.batch(), st.logit_rows, padded_, b, GraphMode::kOn);
    EXPECT_EQ(a.size(), b.size()) << what;
    if (a.size() == b.size()) {
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
          ADD_FAILURE() << what << ": logit " << i << " (row " << i / model_.config().vocab_size
                        << ") differs: eager " << a[i] << " vs padded " << b[i];
          break;
        }
      }
    }
    return b;
  }

 private:
  const LlamaModel& model_;
  KvStorage eager_, padded_;
};

}  // namespace detllm::testing
