// ProfilingOps (kernels/profiling_ops.h): the wrapped backend's bits, and one entry per op and
// shape with the right number of calls.
#include "kernels/profiling_ops.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/llama_model.h"
#include "model/solo_runner.h"
#include "model/synthetic.h"

namespace detllm::kernels {
namespace {

const OpTime* find(const std::vector<OpTime>& times, const std::string& key) {
  for (const OpTime& t : times)
    if (t.key == key) return &t;
  return nullptr;
}

TEST(ProfilingOps, SameBitsAndCallsPerOpAndShape) {
  const ModelConfig c = synthetic_config("tiny-llama");
  const ModelWeights w = make_synthetic_weights(c, 7);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};

  std::unique_ptr<Ops> plain_ops = make_cpu_ops(2);
  LlamaModel plain(c, w, *plain_ops);
  SoloRunner plain_run(plain, 32);
  const std::vector<float> want = plain_run.feed(prompt, /*all_logits=*/true);

  std::unique_ptr<Ops> inner = make_cpu_ops(2);
  ProfilingOps prof(*inner);
  EXPECT_EQ(prof.graph_capture(), nullptr);
  LlamaModel model(c, w, prof);
  SoloRunner run(model, 32);
  prof.reset();  // only the forward below
  const std::vector<float> got = run.feed(prompt, /*all_logits=*/true);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);

  const auto& t = prof.times();
  ASSERT_NE(find(t, "attention"), nullptr);
  EXPECT_EQ(find(t, "attention")->calls, c.n_layers);
  ASSERT_NE(find(t, "qkv_rope_append"), nullptr);  // the fused ops are timed whole
  EXPECT_EQ(find(t, "qkv_rope_append")->calls, c.n_layers);
  ASSERT_NE(find(t, "add_rmsnorm"), nullptr);
  EXPECT_EQ(find(t, "add_rmsnorm")->calls, 2 * c.n_layers - 1);
  const std::string down = "matmul " + std::to_string(c.ffn_dim) + "->" + std::to_string(c.dim) +
                           " m=" + std::to_string(prompt.size());
  ASSERT_NE(find(t, down), nullptr) << down;
  EXPECT_EQ(find(t, down)->calls, c.n_layers);
  const std::string lm_head = "matmul " + std::to_string(c.dim) + "->" +
                              std::to_string(c.vocab_size) + " m=" + std::to_string(prompt.size());
  ASSERT_NE(find(t, lm_head), nullptr) << lm_head;
  EXPECT_EQ(find(t, lm_head)->calls, 1);
  for (const OpTime& o : t) EXPECT_GE(o.total_ms, 0.0) << o.key;
  prof.reset();
  EXPECT_TRUE(prof.times().empty());
}

}  // namespace
}  // namespace detllm::kernels
