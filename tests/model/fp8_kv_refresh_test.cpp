// The FP8 KV cache after a weight update (LlamaModel::refresh_kv_scales): its per-head scales
// are bounded from the weights, so weights written in place (update_weights, a weight sync)
// need them made again from the new weights — then the model gives, bit for bit, the logits of
// a model built on the new weights; with the scales left as loaded it does not (the negative
// control: k_proj × 5 moves K past the old bound and off its E4M3 grid). A model without FP8
// KV is untouched. Run: build/tests/test_model --gtest_filter='Fp8KvRefresh*'.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/ops.h"
#include "model/llama_model.h"
#include "model/solo_runner.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

std::vector<float> logits(const LlamaModel& m) {
  SoloRunner r(m, 40, 4);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 23; ++i) prompt.push_back((i * 37 + 11) % m.config().vocab_size);
  std::vector<float> all = r.feed(prompt, /*all_logits=*/true);
  for (int32_t tok : {5, 19, 2}) {
    const int32_t one[1] = {tok};
    const std::vector<float> l = r.feed(one);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void scale_k(ModelWeights& w, float f) {
  for (LayerWeights& l : w.layers)
    for (float& x : l.wk.w.data) x *= f;
}

TEST(Fp8KvRefresh, ScalesFromTheUpdatedWeightsGiveAFreshModelsBits) {
  for (const char* name : {"tiny-llama", "tiny-qwen2"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = synthetic_config(name);
    ModelWeights w = make_synthetic_weights(c, 42);
    auto ops = kernels::make_cpu_ops(2, CpuActivations::kF32, /*kv_fp8=*/true);
    LlamaModel m(c, w, *ops);  // the CPU computes on w in place
    ASSERT_TRUE(m.kv_fp8_scales());
    const std::vector<float> before = logits(m);

    scale_k(w, 5.0f);  // the update, written in place
    const std::vector<float> stale = logits(m);
    m.refresh_kv_scales(w);
    const std::vector<float> refreshed = logits(m);

    ModelWeights w2 = make_synthetic_weights(c, 42);
    scale_k(w2, 5.0f);
    auto ops2 = kernels::make_cpu_ops(2, CpuActivations::kF32, /*kv_fp8=*/true);
    const LlamaModel fresh(c, w2, *ops2);
    const std::vector<float> want = logits(fresh);
    EXPECT_TRUE(same_bits(refreshed, want)) << "refreshed scales differ from a fresh load's";
    EXPECT_FALSE(same_bits(stale, want)) << "the scales as loaded gave the fresh bits: the "
                                            "control cannot fail";
    EXPECT_FALSE(same_bits(before, want));
  }
}

TEST(Fp8KvRefresh, WithoutFp8KvItIsANoOp) {
  const ModelConfig c = synthetic_config("tiny-llama");
  const ModelWeights w = make_synthetic_weights(c, 42);
  auto ops = kernels::make_cpu_ops(2);
  LlamaModel m(c, w, *ops);
  EXPECT_FALSE(m.kv_fp8_scales());
  const std::vector<float> a = logits(m);
  m.refresh_kv_scales(w);
  EXPECT_TRUE(same_bits(a, logits(m)));
}

}  // namespace
}  // namespace detllm
