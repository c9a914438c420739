// The bookkeeping of the FP8 quantizer fused into the producers of a GEMM input
// (kernels/fp8_fused_input.h): a linear takes a producer's FP8 rows only for the announced
// output, as written, with its row count, k and activation rule; an announcement is used up by
// the next producer; a producer, a copy or a quantizer forgets what was held. The CUDA
// backend's bits with and without the fusion: CudaFp8Model.FusedQuantizer* (GPU).
#include "kernels/fp8_fused_input.h"

#include <gtest/gtest.h>

namespace detllm::kernels {
namespace {

int xb_storage, h_storage, qkv_rule_storage, down_rule_storage, other_rule_storage;
const void* const xb = &xb_storage;
const void* const h = &h_storage;
const void* const qkv_rule = &qkv_rule_storage;
const void* const down_rule = &down_rule_storage;
const void* const other_rule = &other_rule_storage;

TEST(Fp8FusedInput, TheAnnouncedOutputIsHeldForItsReader) {
  Fp8FusedInput f;
  f.announce(xb, 4096, qkv_rule);
  EXPECT_EQ(f.produce(xb, 3, 4096), qkv_rule);
  EXPECT_TRUE(f.holds(xb, 3, 4096, qkv_rule));
  EXPECT_TRUE(f.holds(xb, 3, 4096, qkv_rule)) << "held for every linear of the rule, not once";
  EXPECT_FALSE(f.holds(h, 3, 4096, qkv_rule)) << "another input";
  EXPECT_FALSE(f.holds(xb, 2, 4096, qkv_rule)) << "another row count";
  EXPECT_FALSE(f.holds(xb, 3, 2048, qkv_rule)) << "another k";
  EXPECT_FALSE(f.holds(xb, 3, 4096, other_rule)) << "a part with another activation rule";
}

TEST(Fp8FusedInput, NothingIsHeldWithoutAMatchingAnnouncement) {
  Fp8FusedInput f;
  EXPECT_EQ(f.produce(xb, 3, 4096), nullptr) << "no announcement";
  EXPECT_FALSE(f.holds(xb, 3, 4096, qkv_rule));
  f.announce(xb, 4096, qkv_rule);
  EXPECT_EQ(f.produce(h, 3, 4096), nullptr) << "a producer of another output";
  EXPECT_EQ(f.produce(xb, 3, 4096), nullptr) << "the announcement was used up by it";
  f.announce(xb, 4096, qkv_rule);
  EXPECT_EQ(f.produce(xb, 3, 14336), nullptr) << "written with another k than the reader's";
  f.announce(xb, 4096, qkv_rule);
  EXPECT_EQ(f.produce(xb, 0, 4096), nullptr) << "no rows";
  f.announce(xb, 4096, nullptr);
  EXPECT_EQ(f.produce(xb, 3, 4096), nullptr) << "no rule";
  f.announce(xb, 4096, qkv_rule);
  f.withdraw();
  EXPECT_EQ(f.produce(xb, 3, 4096), nullptr) << "withdrawn";
}

// The layer's sequence: norm → qkv, attention → o, norm → gate_up, SiLU·mul → down.
TEST(Fp8FusedInput, TheLayersSequenceHoldsEachInputUntilItIsWrittenOver) {
  Fp8FusedInput f;
  f.announce(xb, 4096, qkv_rule);
  ASSERT_EQ(f.produce(xb, 1, 4096), qkv_rule);  // add_rmsnorm
  EXPECT_TRUE(f.holds(xb, 1, 4096, qkv_rule));  // the qkv projection
  f.forget();                                    // attention_rounded writes att
  EXPECT_FALSE(f.holds(xb, 1, 4096, qkv_rule));
  f.announce(xb, 4096, other_rule);
  ASSERT_EQ(f.produce(xb, 1, 4096), other_rule);  // the FFN norm, read by gate_up
  EXPECT_FALSE(f.holds(xb, 1, 4096, qkv_rule)) << "xb now holds the FFN norm's rows";
  f.announce(h, 14336, down_rule);
  ASSERT_EQ(f.produce(h, 1, 14336), down_rule);  // silu_mul_rows
  EXPECT_FALSE(f.holds(xb, 1, 4096, other_rule)) << "one input held at a time";
  EXPECT_TRUE(f.holds(h, 1, 14336, down_rule));
  // The next layer's norm without an announcement (a model that fuses nothing) forgets it.
  EXPECT_EQ(f.produce(xb, 1, 4096), nullptr);
  EXPECT_FALSE(f.holds(h, 1, 14336, down_rule));
}

TEST(Fp8FusedInput, ForgetDropsTheHeldInputNotTheAnnouncement) {
  Fp8FusedInput f;
  f.announce(xb, 4096, qkv_rule);
  f.forget();  // a copy before the producer runs
  EXPECT_EQ(f.produce(xb, 2, 4096), qkv_rule);
  f.forget();  // a quantizer overwrote the storage
  EXPECT_FALSE(f.holds(xb, 2, 4096, qkv_rule));
}

}  // namespace
}  // namespace detllm::kernels
