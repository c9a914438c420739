// Decode-step padding (model/step_padding.h): row/table buckets, the pad decision, and the
// padded metadata layout — pad rows on their own table rows and pad slots, real rows unchanged.
#include "model/step_padding.h"

#include <gtest/gtest.h>

#include "model/decode_steps_util.h"

namespace detllm {
namespace {

TEST(StepPadding, RowBuckets) {
  EXPECT_EQ(row_bucket(0), 0);
  EXPECT_EQ(row_bucket(1), 1);
  EXPECT_EQ(row_bucket(2), 2);
  EXPECT_EQ(row_bucket(3), 4);
  EXPECT_EQ(row_bucket(5), 8);
  EXPECT_EQ(row_bucket(8), 8);
  EXPECT_EQ(row_bucket(129), 256);
  EXPECT_EQ(row_bucket(256), 256);
  EXPECT_EQ(row_bucket(257), 384);
  EXPECT_EQ(row_bucket(385), 512);
  EXPECT_EQ(row_bucket(512), 512);
  EXPECT_EQ(row_bucket(513), 0);  // beyond the largest bucket: not padded
  EXPECT_EQ(decode_row_buckets().back(), 512);
  EXPECT_EQ(max_pad_rows(), 127);  // 129 rows → 256, 257 → 384, 385 → 512
  for (int32_t n = 1; n <= 512; ++n) {
    EXPECT_GE(row_bucket(n), n);
    EXPECT_LE(row_bucket(n) - n, max_pad_rows());
  }
}

TEST(StepPadding, TableBuckets) {
  EXPECT_EQ(table_bucket(0), 1);
  EXPECT_EQ(table_bucket(1), 1);
  EXPECT_EQ(table_bucket(3), 4);
  EXPECT_EQ(table_bucket(64), 64);
  EXPECT_EQ(table_bucket(65), 128);
}

TEST(StepPadding, Decision) {
  testing::DecodeWorld w(6, 64, 4, 100, 1);
  for (int32_t s = 0; s < 6; ++s) w.step({s}, 5 + s);  // prompts
  const testing::TestStep decode = w.step({4, 1, 2});
  const kernels::StepBatch b = decode.batch();
  const auto key = plan_padded_step(b, GraphMode::kOn, false, max_pad_rows());
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->rows, 4);
  EXPECT_EQ(key->table_cols, table_bucket(b.max_blocks));
  // auto: only where the backend has graphs; off: never.
  EXPECT_FALSE(plan_padded_step(b, GraphMode::kAuto, false, max_pad_rows()).has_value());
  EXPECT_TRUE(plan_padded_step(b, GraphMode::kAuto, true, max_pad_rows()).has_value());
  EXPECT_FALSE(plan_padded_step(b, GraphMode::kOff, true, max_pad_rows()).has_value());
  // No pad slots for the one pad row: run as it is.
  EXPECT_FALSE(plan_padded_step(b, GraphMode::kOn, true, 0).has_value());
  // Not a decode step (a sequence contributes 3 tokens): run as it is.
  const testing::TestStep chunk = w.step({0, 3}, 3);
  EXPECT_FALSE(plan_padded_step(chunk.batch(), GraphMode::kOn, true, 200).has_value());
  // An exact bucket needs no pad slots.
  const testing::TestStep four = w.step({0, 1, 2, 3});
  EXPECT_EQ(plan_padded_step(four.batch(), GraphMode::kOn, true, 0)->rows, 4);
}

TEST(StepPadding, PaddedLayout) {
  const int32_t bs = 4, pad_block = 50;
  testing::DecodeWorld w(6, 64, bs, 100, 2);
  for (int32_t s = 0; s < 6; ++s) w.step({s}, 3 + 4 * s);
  const testing::TestStep st = w.step({5, 0, 3, 2, 1});  // 5 rows → bucket 8
  const kernels::StepBatch b = st.batch();
  const std::vector<int32_t> logit_rows = {1, 4};
  const PaddedStepKey key = *plan_padded_step(b, GraphMode::kOn, true, max_pad_rows());
  ASSERT_EQ(key.rows, 8);
  PaddedStep p;
  pad_step(key, st.tokens, b, logit_rows, pad_block, bs, p);
  ASSERT_EQ(p.meta.size(), padded_meta_size(key));
  EXPECT_EQ(p.n_tokens, 5);
  EXPECT_EQ(p.n_logit_rows, 2);
  const kernels::StepBatch pb = p.batch(p.meta.data());
  EXPECT_EQ(pb.n_tokens, 8);
  EXPECT_EQ(pb.n_seqs, 8);
  EXPECT_EQ(pb.max_blocks, key.table_cols);
  for (int32_t i = 0; i < 5; ++i) {  // real rows unchanged, in their order
    EXPECT_EQ(p.tokens()[i], st.tokens[i]);
    EXPECT_EQ(pb.positions[i], b.positions[i]);
    EXPECT_EQ(pb.seq_of_token[i], b.seq_of_token[i]);
    EXPECT_EQ(pb.slots[i], b.slots[i]);
    for (int32_t j = 0; j < b.max_blocks; ++j)
      EXPECT_EQ(pb.block_tables[i * pb.max_blocks + j], b.block_tables[i * b.max_blocks + j]);
  }
  for (int32_t i = 5; i < 8; ++i) {  // pads: own table row, pad slots, position 0
    EXPECT_EQ(p.tokens()[i], 0);
    EXPECT_EQ(pb.positions[i], 0);
    EXPECT_EQ(pb.seq_of_token[i], i);
    EXPECT_EQ(pb.slots[i], pad_block * bs + (i - 5));
    EXPECT_EQ(pb.block_tables[i * pb.max_blocks], pad_block + (i - 5) / bs);
  }
  EXPECT_EQ(p.logit_rows()[0], 1);  // real logit rows first
  EXPECT_EQ(p.logit_rows()[1], 4);
  for (int32_t i = 2; i < 8; ++i) EXPECT_LT(p.logit_rows()[i], 8);
  // A table wider than the bucket is refused.
  EXPECT_THROW(pad_step(PaddedStepKey{8, 1}, st.tokens, b, logit_rows, pad_block, bs, p),
               std::exception);
}

TEST(StepPadding, ModeNames) {
  EXPECT_STREQ(graph_mode_name(GraphMode::kAuto), "auto");
  EXPECT_STREQ(graph_mode_name(GraphMode::kOn), "on");
  EXPECT_STREQ(graph_mode_name(GraphMode::kOff), "off");
}

}  // namespace
}  // namespace detllm
