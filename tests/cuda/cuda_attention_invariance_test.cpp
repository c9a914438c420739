// Attention invariance on the GPU, bit for bit: a sequence's output rows are the same whether
// it is prefilled in one call, decoded one token at a time, or chunked (7, 333); alone or
// batched with other sequences of other lengths in shuffled token order; on other physical
// blocks; with the KV splits run in one block each or all in the row's block. The sequence
// crosses many 128-position split edges. This is the fp32-KV kernel (attention.cu); the bf16
// tensor-core kernel has its own test (cuda_attention_tc_test.cpp).
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaAttention*'.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"

namespace detllm::kernels {
namespace {

using namespace cuda_testing;

constexpr int kLen = 1100;  // nine KV splits of 128, tile edges everywhere

std::vector<std::vector<Chunk>> chunked(int seq, int len, int chunk) {
  std::vector<std::vector<Chunk>> steps;
  for (int start = 0; start < len; start += chunk)
    steps.push_back({Chunk{seq, start, std::min(chunk, len - start)}});
  return steps;
}

void expect_same_rows(const DevicePagedWorld& a, int seq_a, const DevicePagedWorld& b,
                      int seq_b, int len) {
  for (int p = 0; p < len; ++p) {
    const int64_t d = first_bit_difference(a.output(seq_a, p).data(), b.output(seq_b, p).data(),
                                           a.row_floats());
    ASSERT_EQ(d, -1) << "position " << p << " element " << d << ": "
                     << a.output(seq_a, p)[d] << " vs " << b.output(seq_b, p)[d];
  }
}

class CudaAttentionInvariance : public ::testing::TestWithParam<AttnShape> {};

TEST_P(CudaAttentionInvariance, PrefillDecodeChunksBatchesLayoutsSplits) {
  DETLLM_SKIP_WITHOUT_GPU();
  const AttnShape shape = GetParam();
  auto ops = invariant_ops(-1, DType::kF32);
  // Baseline: alone, whole prefill in one call, identity layout (many tokens: splits in-block).
  DevicePagedWorld base(*ops, shape, {42}, {kLen}, 0);
  base.step({{0, 0, kLen}});

  for (int split_blocks : {-1, 0, 1}) {
    auto o = invariant_ops(split_blocks, DType::kF32);
    SCOPED_TRACE(::testing::Message() << "split placement " << split_blocks);
    {
      SCOPED_TRACE("whole prefill, shuffled blocks");
      DevicePagedWorld w(*o, shape, {42}, {kLen}, 11);
      w.step({{0, 0, kLen}});
      expect_same_rows(base, 0, w, 0, kLen);
    }
    for (int chunk : {1, 7, 333}) {
      if (chunk == 1 && split_blocks == 0) continue;  // decode is covered by -1 (and 1)
      SCOPED_TRACE(::testing::Message() << "chunks of " << chunk);
      DevicePagedWorld w(*o, shape, {42}, {kLen}, 100 + chunk);
      for (const auto& step : chunked(0, kLen, chunk)) w.step(step);
      expect_same_rows(base, 0, w, 0, kLen);
    }
    {
      SCOPED_TRACE("mixed batches");
      const std::vector<int> lens = {50, kLen, 9, 600};
      DevicePagedWorld w(*o, shape, {7, 42, 8, 9}, lens, 1234);
      std::mt19937 rng(99);
      int done[4] = {0, 0, 0, 0};
      const int chunk_of[4] = {13, 37, 1, 80};
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
        w.step(step, order);
      }
      expect_same_rows(base, 0, w, 1, kLen);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionInvariance,
                         ::testing::Values(AttnShape{32, 8, 128, 16},  // Llama-3.1-8B
                                           AttnShape{6, 2, 64, 16},    // SmolLM2-like
                                           AttnShape{4, 2, 16, 4},     // tiny-llama
                                           AttnShape{2, 1, 36, 5}),    // odd head_dim and block
                         [](const auto& info) {
                           const AttnShape& s = info.param;
                           return fmt::format("h{}kv{}d{}bs{}", s.n_heads, s.n_kv_heads,
                                              s.head_dim, s.block_size);
                         });

// Re-scoring a finished sequence into fresh blocks of a cache holding other sequences gives
// the bits it was decoded with (V4/V6).
TEST(CudaAttentionRescore, RescoreEqualsDecode) {
  DETLLM_SKIP_WITHOUT_GPU();
  const AttnShape shape{32, 8, 128, 16};
  auto ops = invariant_ops(-1, DType::kF32);
  DevicePagedWorld decode(*ops, shape, {5}, {kLen}, 3);
  for (const auto& step : chunked(0, kLen, 1)) decode.step(step);
  DevicePagedWorld rescore(*ops, shape, {6, 5}, {20, kLen}, 4);
  rescore.step({{0, 0, 20}});
  rescore.step({{1, 0, kLen}});
  expect_same_rows(decode, 0, rescore, 1, kLen);
}

}  // namespace
}  // namespace detllm::kernels
