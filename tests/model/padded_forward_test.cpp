// V8 at the model level on the CPU: decode steps padded to a bucket (GraphMode::kOn; the CPU
// has no graphs, so the padded step runs eagerly) give the same logits, bit for bit, as the
// step run as it is — over many steps, rows in shuffled orders, 1…7 rows (3 in 4, 5 in 8), on
// shuffled KV blocks, for the three tiny synthetic models. The CUDA twin, with graph replay:
// tests/cuda/cuda_graph_test.cpp.
#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "model/decode_steps_util.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

class PaddedForward : public ::testing::TestWithParam<const char*> {};

TEST_P(PaddedForward, SameBitsAsEager) {
  const ModelConfig cfg = synthetic_config(GetParam());
  const ModelWeights w = make_synthetic_weights(cfg, 7);
  auto ops = kernels::make_cpu_ops(2);
  LlamaModel model(cfg, w, *ops);
  const int32_t bs = 4, n_seqs = 7;
  testing::DecodeWorld world(n_seqs, 64, bs, cfg.vocab_size, 11);
  testing::EagerVsPadded check(model, world, bs);
  for (int32_t s = 0; s < n_seqs; ++s) check.run(world.step({s}, 1 + 3 * s), "prompt");
  const int32_t sizes[] = {3, 5, 1, 7, 2, 6, 4, 3, 5, 7, 1, 6};
  for (int32_t k : sizes) {
    check.run(world.step(world.pick(k)), "decode of " + std::to_string(k) + " rows");
    if (HasFailure()) return;
  }
  EXPECT_EQ(model.step_stats().n_padded_steps, static_cast<int64_t>(std::size(sizes)) + 1);
  EXPECT_EQ(model.step_stats().n_graph_replays, 0);  // no graphs on the CPU
}

INSTANTIATE_TEST_SUITE_P(Tiny, PaddedForward,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace detllm
