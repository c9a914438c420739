// The decode-graph warm-up (model/decode_warmup.h, Engine::warm_up_decode_graphs) on the CPU,
// with the graph-capturing CPU backend of the negative controls (CpuGraphOps, fault_ops.h):
// the warm-up captures every decode shape the engine can use, a run after it replays graphs
// from its first decode step (no capture left) and its logits equal an eager run's bit for bit
// (V8). Control: with the backend whose replays change one ulp ("graph-replay"), the same
// comparison fails — the warm-up really moves steps onto replays. And the shapes' pure logic
// (keys, pad slots). The GPU runs the same warm-up in serve (tests/cuda/cuda_graph_test.cpp).
// Run: build/tests/test_conformance --gtest_filter='DecodeWarmup*'
#include <gtest/gtest.h>

#include "conformance/decode_warmup_checks.h"
#include "conformance/fault_ops.h"

namespace detllm {
namespace {

using testing::run_engine;
using testing::same_bits;
using testing::WarmupRun;

TEST(DecodeWarmup, CapturesEveryShapeAndChangesNoBit) {
  auto eager_ops = conformance::make_fault_ops("graph-replay-exact", 2);
  const WarmupRun eager = run_engine(*eager_ops, GraphMode::kOff, false);
  ASSERT_EQ(eager.logits.size(), 6u * 9u);

  auto ops = conformance::make_fault_ops("graph-replay-exact", 2);
  const WarmupRun warm = run_engine(*ops, GraphMode::kAuto, true);
  // Rows 1, 2, 4, 8 (max_seqs 8) x table widths 1 … 16 (48 tokens in blocks of 4 → 12 → 16).
  EXPECT_EQ(warm.warmup.steps, 4 * 5);
  EXPECT_EQ(warm.warmup.captures, 4 * 5);
  EXPECT_EQ(warm.captures_in_run, 0) << "a decode shape was left to capture in the run";
  EXPECT_GT(warm.replays_in_run, 0);
  EXPECT_TRUE(same_bits(warm.logits, eager.logits)) << "the warm-up changed a logit bit";

  // Without the warm-up the run captures its shapes itself (same bits too).
  auto cold_ops = conformance::make_fault_ops("graph-replay-exact", 2);
  const WarmupRun cold = run_engine(*cold_ops, GraphMode::kAuto, false);
  EXPECT_GT(cold.captures_in_run, 0);
  EXPECT_TRUE(same_bits(cold.logits, eager.logits));
}

// Control: replays that differ by one ulp. After the warm-up every decode step replays, so the
// comparison that passed above must fail here.
TEST(DecodeWarmup, ControlFaultyReplaysAreSeen) {
  auto eager_ops = conformance::make_fault_ops("graph-replay-exact", 2);
  const WarmupRun eager = run_engine(*eager_ops, GraphMode::kOff, false);
  auto faulty = conformance::make_fault_ops("graph-replay", 2);
  const WarmupRun warm = run_engine(*faulty, GraphMode::kAuto, true);
  EXPECT_EQ(warm.captures_in_run, 0);
  EXPECT_FALSE(same_bits(warm.logits, eager.logits));
}

// A backend without graphs (the plain CPU): nothing to capture, no warm-up steps — under kAuto
// (no padding) and under kOn (padded steps, run eagerly).
TEST(DecodeWarmup, NothingWithoutGraphs) {
  for (GraphMode mode : {GraphMode::kAuto, GraphMode::kOn}) {
    auto ops = kernels::make_cpu_ops(2);
    const WarmupRun r = run_engine(*ops, mode, true);
    EXPECT_EQ(r.warmup.steps, 0) << graph_mode_name(mode);
    EXPECT_EQ(r.warmup.captures, 0);
  }
}

TEST(DecodeWarmup, Keys) {
  const DecodePadding buckets{GraphMode::kAuto, 0};
  EXPECT_TRUE(decode_warmup_keys(buckets, false, 256, 4096, 16, 100).empty());
  const auto k = decode_warmup_keys(buckets, true, 256, 4096, 16, 1000);
  ASSERT_EQ(k.size(), 9u * 9u);  // rows 1 … 256, widths 1 … 256 blocks
  EXPECT_EQ(k.front(), (PaddedStepKey{1, 1}));
  EXPECT_EQ(k[8], (PaddedStepKey{256, 1}));  // every row bucket at the narrowest width first
  EXPECT_EQ(k.back(), (PaddedStepKey{256, 256}));
  EXPECT_EQ(decode_warmup_keys(buckets, true, 256, 4096, 16, 20).size(), 20u);
  // max_seqs 5: rows 1, 2, 4, 8 (a step of 5 rows runs in the 8 bucket).
  EXPECT_EQ(decode_warmup_keys(buckets, true, 5, 16, 16, 100).size(), 4u);
  // The padded mode's fixed shape first, then the buckets (steps without it use them).
  const auto f = decode_warmup_keys(DecodePadding{GraphMode::kOn, 6}, false, 6, 16, 16, 100);
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[0], (PaddedStepKey{6, 1}));
  EXPECT_EQ(decode_warmup_keys(DecodePadding{GraphMode::kOff, 0}, true, 8, 64, 16, 100).size(),
            0u);
}

// Every row bucket (1 … 512) gets a warm-up step that really runs padded to it: the step's
// real rows are one more than the bucket below (a step of rows/2 + 1 real rows ran as 256,
// not 384, and serve's warm-up refused to start at max_seqs 512).
TEST(DecodeWarmup, EveryRowBucketWarmsUpAtItsOwnShape) {
  auto ops = conformance::make_fault_ops("graph-replay-exact", 2);
  const ModelConfig cfg = synthetic_config("tiny-llama");
  const ModelWeights w = make_synthetic_weights(cfg, 5);
  LlamaModel model(cfg, w, *ops);
  const DecodePadding padding{GraphMode::kAuto, 0};
  KvStorage kv(*ops, cfg, 8, 4, decode_warmup_pad_slots(padding, true));
  std::vector<PaddedStepKey> keys;
  for (int32_t r : decode_row_buckets()) keys.push_back({r, 1});
  const NumericsMode numerics[] = {NumericsMode::kInvariant};
  const DecodeWarmupResult res = warm_up_decode_steps(model, kv, padding, keys, numerics);
  EXPECT_EQ(res.steps, static_cast<int64_t>(keys.size()));
}

TEST(DecodeWarmup, PadSlots) {
  EXPECT_EQ(decode_warmup_pad_slots(DecodePadding{GraphMode::kAuto, 0}, false), 0);
  // The warm-up's largest step: R rows on R pad slots, R the largest bucket (or the fixed rows).
  EXPECT_EQ(decode_warmup_pad_slots(DecodePadding{GraphMode::kAuto, 0}, true), 512);
  EXPECT_EQ(decode_warmup_pad_slots(DecodePadding{GraphMode::kOn, 300}, false), 512);
  EXPECT_EQ(decode_warmup_pad_slots(DecodePadding{GraphMode::kOn, 600}, false), 600);
  EXPECT_GE(decode_warmup_pad_slots(DecodePadding{GraphMode::kOn, 0}, false),
            pad_slots_needed(DecodePadding{GraphMode::kOn, 0}, false));
}

}  // namespace
}  // namespace detllm
