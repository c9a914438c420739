// The decode warps' launch geometry (kernels/cuda/attention_tc_grid.h), host code, on the CPU:
// every (token, KV head, split) item has a warp, whole rows are chosen only for short rows that
// fill the card, the forced placements do what they say, and the quarter tiles' ring follows
// the item count. Which warp runs which split changes no bit (the GPU tests show that); these
// choices decide only the speed and whether a merge kernel runs.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "kernels/cuda/attention_tc_grid.h"

namespace detllm::kernels::cuda::tc {
namespace {

AttentionArgs args(int n_tokens, int n_kv_heads, int max_blocks, int block_size) {
  AttentionArgs a;
  a.n_tokens = n_tokens;
  a.n_kv_heads = n_kv_heads;
  a.n_heads = 4 * n_kv_heads;
  a.head_dim = 128;
  a.max_blocks = max_blocks;
  a.block_size = block_size;
  return a;
}

TEST(CudaDecodeGrid, EveryItemHasAWarpUnderEveryPlacement) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const AttentionArgs a =
        args(1 + int(rng() % 600), 1 + int(rng() % 8), 1 + int(rng() % 2100), 1 << (rng() % 6));
    for (int warps : {4, 8, 12, 16})
      for (int force : {-1, 0, 1}) {
        const DecodeGrid d = decode_grid(a, warps, force);
        ASSERT_EQ(d.max_splits, max_splits_of(a));
        ASSERT_GE(d.per_warp, 1);
        ASSERT_LE(d.per_warp, d.max_splits);
        ASSERT_GE(int64_t{d.n_zc} * d.per_warp, d.max_splits) << "a split without a warp";
        ASSERT_LT(int64_t{d.n_zc - 1} * d.per_warp, d.max_splits) << "a run of no splits";
        ASSERT_GE(int64_t{d.blocks} * warps, int64_t{a.n_tokens} * d.n_zc * a.n_kv_heads);
        ASSERT_LT(int64_t{d.blocks - 1} * warps, int64_t{a.n_tokens} * d.n_zc * a.n_kv_heads);
        if (force == 0) {
          ASSERT_EQ(d.n_zc, 1);
        }
        if (force == 1) {
          ASSERT_EQ(d.per_warp, 1);
        }
        if (force == -1 && d.n_zc == 1 && d.max_splits > 1) {
          // Whole rows (the warp merges them) only for short rows whose warps fill the card,
          // or when two waves' worth of items per warp is a whole row anyway.
          const int64_t row_warps = int64_t{a.n_tokens} * a.n_kv_heads;
          const int64_t two_waves = int64_t{kSms} * warps * 2;
          const bool short_rows =
              d.max_splits <= kWholeRowSplits && row_warps >= int64_t{kSms} * warps * 3 / 4;
          ASSERT_TRUE(short_rows || row_warps * d.max_splits > two_waves * (d.max_splits - 1))
              << a.n_tokens << " tokens, " << d.max_splits << " splits, " << warps << " warps";
        }
      }
  }
}

TEST(CudaDecodeGrid, ChosenPlacementOnTheMeasuredSteps) {
  // Llama-8B heads, blocks of 16; the table as wide as the context (+1 block past 512).
  const DecodeGrid step256 = decode_grid(args(256, 8, 33, 16), 16, -1);  // 256 × 512, 3 splits
  EXPECT_EQ(step256.n_zc, 1) << "the batch-256 step merges its rows in the warps";
  EXPECT_EQ(step256.blocks, 128u);
  const DecodeGrid long8 = decode_grid(args(8, 8, 2048, 16), 16, -1);  // 8 × 32768
  EXPECT_GT(long8.n_zc, 1) << "long rows are spread over warps";
  EXPECT_GT(decode_grid(args(256, 8, 128, 16), 16, -1).n_zc, 1) << "256 × 2048: 8 splits";
  EXPECT_GT(decode_grid(args(64, 8, 33, 16), 16, -1).n_zc, 1) << "512 row warps: too few";
}

TEST(CudaDecodeGrid, QuarterRingFollowsTheItems) {
  EXPECT_EQ((kDecWarps<3, kKvTile / 4>), 16);
  EXPECT_EQ((kDecWarps<6, kKvTile / 4>), 8);
  EXPECT_EQ(decode_quarter_ring(args(1, 8, 2048, 16)), 6);  // 1 × 32768: 1,024 items
  EXPECT_EQ(decode_quarter_ring(args(8, 8, 128, 16)), 6);   // 8 × 2048: 512
  EXPECT_EQ(decode_quarter_ring(args(8, 8, 512, 16)), 3);   // 8 × 8192: 2,048
  EXPECT_EQ(decode_quarter_ring(args(256, 8, 32, 16)), 3);  // 256 × 512: 4,096
  EXPECT_EQ(decode_quarter_ring(args(198, 8, 16, 16)), 3);  // 1,584: the threshold
  EXPECT_EQ(decode_quarter_ring(args(1583, 1, 16, 16)), 6);
}

}  // namespace
}  // namespace detllm::kernels::cuda::tc
