// Attention invariance, bit for bit: a sequence's output rows are the same whether it is
// prefilled in one call, decoded one token at a time, or chunked by 7; alone or batched with
// other sequences of other lengths in shuffled token order; on other physical blocks; with
// 1, 2, 3 or 4 threads. Run: build-kern/tests/test_kernels --gtest_filter='AttentionInvariance*'.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace detllm::kernels {
namespace {

using testing::AttnShape;
using testing::Chunk;
using testing::PagedWorld;

constexpr int kLen = 77;  // sequence under test: crosses two 32-position tile edges

// Splits [0, len) of sequence seq into steps of `chunk` tokens.
std::vector<std::vector<Chunk>> chunked(int seq, int len, int chunk) {
  std::vector<std::vector<Chunk>> steps;
  for (int start = 0; start < len; start += chunk)
    steps.push_back({Chunk{seq, start, std::min(chunk, len - start)}});
  return steps;
}

void expect_same_rows(const PagedWorld& a, int seq_a, const PagedWorld& b, int seq_b, int len) {
  for (int p = 0; p < len; ++p) {
    SCOPED_TRACE(::testing::Message() << "position " << p);
    EXPECT_BITS_EQ(a.output(seq_a, p).data(), b.output(seq_b, p).data(), a.row_floats());
  }
}

class AttentionInvariance : public ::testing::TestWithParam<AttnShape> {};

TEST_P(AttentionInvariance, PrefillDecodeChunksBatchesLayoutsThreads) {
  const AttnShape shape = GetParam();
  // Baseline: the sequence alone, whole prefill in one call, identity layout, one thread.
  PagedWorld base(shape, {42}, {kLen}, /*block_seed=*/0);
  {
    auto ops = make_cpu_ops(1);
    base.step(*ops, {{0, 0, kLen}});
  }

  for (int n_threads : {1, 2, 3, 4}) {
    auto ops = make_cpu_ops(n_threads);
    SCOPED_TRACE(::testing::Message() << "threads " << n_threads);
    {
      SCOPED_TRACE("whole prefill, shuffled blocks");
      PagedWorld w(shape, {42}, {kLen}, 11 + n_threads);
      w.step(*ops, {{0, 0, kLen}});
      expect_same_rows(base, 0, w, 0, kLen);
    }
    for (int chunk : {1, 7, 32}) {
      SCOPED_TRACE(::testing::Message() << "chunks of " << chunk);
      PagedWorld w(shape, {42}, {kLen}, 100 + chunk);
      for (const auto& step : chunked(0, kLen, chunk)) w.step(*ops, step);
      expect_same_rows(base, 0, w, 0, kLen);
    }
    {
      // Batched: the sequence under test (seq 1) shares steps with others of other lengths,
      // prefill chunks mixed with decode tokens, tokens in shuffled order, shuffled blocks.
      SCOPED_TRACE("mixed batches");
      const std::vector<int> lens = {50, kLen, 9, 130};
      PagedWorld w(shape, {7, 42, 8, 9}, lens, 1234 + n_threads);
      std::mt19937 rng(99 + n_threads);
      int done[4] = {0, 0, 0, 0};
      const int chunk_of[4] = {13, 5, 1, 40};  // tokens per step for each sequence
      while (done[0] < lens[0] || done[1] < lens[1] || done[2] < lens[2] || done[3] < lens[3]) {
        std::vector<Chunk> step;
        for (int s = 0; s < 4; ++s) {
          const int count = std::min(chunk_of[s], lens[s] - done[s]);
          if (count > 0) step.push_back({s, done[s], count});
          done[s] += count;
        }
        int n_tok = 0;
        for (const Chunk& c : step) n_tok += c.count;
        std::vector<int> order(n_tok);
        for (int i = 0; i < n_tok; ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), rng);
        w.step(*ops, step, order);
      }
      expect_same_rows(base, 0, w, 1, kLen);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionInvariance,
                         ::testing::Values(AttnShape{6, 2, 64, 16},  // GQA 3:1, SmolLM2-like
                                           AttnShape{4, 4, 36, 5},   // head_dim % 8 != 0
                                           AttnShape{2, 1, 8, 64}),  // block > tile
                         [](const auto& info) {
                           const AttnShape& s = info.param;
                           return fmt::format("h{}kv{}d{}bs{}", s.n_heads, s.n_kv_heads, s.head_dim,
                                              s.block_size);
                         });

// Re-scoring: a finished sequence prefilled again into fresh blocks of a cache that already
// holds other sequences gives the bits it was decoded with (design V4/V6).
TEST(AttentionRescore, RescoreEqualsDecode) {
  const AttnShape shape{6, 2, 64, 16};
  auto ops = make_cpu_ops(2);
  PagedWorld decode(shape, {5}, {kLen}, 3);
  for (const auto& step : chunked(0, kLen, 1)) decode.step(*ops, step);
  PagedWorld rescore(shape, {6, 5}, {20, kLen}, 4);
  rescore.step(*ops, {{0, 0, 20}});
  rescore.step(*ops, {{1, 0, kLen}});
  expect_same_rows(decode, 0, rescore, 1, kLen);
}

}  // namespace
}  // namespace detllm::kernels
