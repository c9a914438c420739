// LlamaModel with q/k/v and gate/up fused at load equals the model with them apart, bit for
// bit, on the host backends, for Llama (plain), Qwen2 (q/k/v biases) and Qwen3 (q/k norms), from
// a synthetic recipe and from host weights; and kAuto resolves as llama_model.h says.
// Run: build/tests/test_model --gtest_filter='ProjectionLayout*'.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "kernels/ops.h"
#include "model/projection_layout_checks.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

class ProjectionLayoutModels : public ::testing::TestWithParam<std::string> {};

TEST_P(ProjectionLayoutModels, FusedEqualsSeparateFromARecipe) {
  const ModelConfig c = synthetic_config(GetParam());
  const SyntheticWeights recipe = synthetic_recipe(c, 3);
  for (int threads : {0, 2}) {  // 0: the reference backend
    auto ops = threads == 0 ? kernels::make_ref_ops() : kernels::make_cpu_ops(threads);
    const LlamaModel fused(c, recipe, *ops, ProjectionLayout::kFused);
    const LlamaModel apart(c, recipe, *ops, ProjectionLayout::kSeparate);
    testing::expect_same_logits(fused, apart, GetParam() + " on " + std::string(ops->name()));
  }
}

TEST_P(ProjectionLayoutModels, FusedEqualsSeparateFromHostWeights) {
  const ModelConfig c = synthetic_config(GetParam());
  const ModelWeights w = make_synthetic_weights(c, 3);
  auto ops = kernels::make_cpu_ops(2);
  const LlamaModel fused(c, w, *ops, ProjectionLayout::kFused);
  const LlamaModel apart(c, w, *ops, ProjectionLayout::kSeparate);
  testing::expect_same_logits(fused, apart, GetParam());
}

INSTANTIATE_TEST_SUITE_P(TinyModels, ProjectionLayoutModels,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param;
                           for (char& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

TEST(ProjectionLayout, AutoKeepsHostFp32WeightsInPlaceAndFusesGeneratedOnes) {
  const ModelConfig c = synthetic_config("tiny-llama");
  auto ops = kernels::make_cpu_ops(1);
  EXPECT_EQ(LlamaModel(c, make_synthetic_weights(c, 1), *ops).projection_layout(),
            ProjectionLayout::kSeparate);
  EXPECT_EQ(LlamaModel(c, synthetic_recipe(c, 1), *ops).projection_layout(),
            ProjectionLayout::kFused);
}

}  // namespace
}  // namespace detllm
