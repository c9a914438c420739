// The Hugging Face parameter table of update_weights (src/api/weight_update.h): the names and
// shapes made from the config alone (a model that exists only in device memory, e.g.
// synthetic:llama-3.1-8b on CUDA) equal those read from host weights, for every synthetic family;
// the all-or-nothing checks, including tied embeddings given as device memory (not readable
// here: one tensor under both names passes, two do not). The device write path itself runs on
// the H200 (tests/python/test_cuda_weights.py). Run: build/tests/test_api.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "model/weight_update.h"
#include "core/error.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

TEST(WeightUpdate, ConfigOnlySlotsEqualTheHostWeightsSlots) {
  for (const char* name : {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-qwen3-moe", "mini-olmoe"}) {
    const ModelConfig c = synthetic_config(name);
    ModelWeights w = make_synthetic_weights(c, 3);
    const std::vector<ParameterSlot> host = parameter_slots(c, &w);
    const std::vector<ParameterSlot> bare = parameter_slots(c, nullptr);
    ASSERT_EQ(host.size(), bare.size()) << name;
    for (size_t i = 0; i < host.size(); ++i) {
      EXPECT_EQ(host[i].name, bare[i].name) << name;
      EXPECT_EQ(host[i].shape, bare[i].shape) << host[i].name;
      EXPECT_EQ(host[i].param, bare[i].param) << host[i].name;
      EXPECT_EQ(host[i].layer, bare[i].layer) << host[i].name;
      EXPECT_EQ(host[i].expert, bare[i].expert) << host[i].name;
      EXPECT_NE(host[i].data, nullptr) << host[i].name;
      EXPECT_EQ(bare[i].data, nullptr) << bare[i].name;
    }
  }
}

// A MoE layer: the router, every expert's gate/up/down (each its own target, not an alias of
// another expert's: two experts' tensors in one update pass the checks), no dense MLP names.
TEST(WeightUpdate, MixtureOfExpertsTable) {
  const ModelConfig c = synthetic_config("tiny-qwen3-moe");
  ModelWeights w = make_synthetic_weights(c, 3);
  const std::vector<ParameterSlot> s = parameter_slots(c, &w);
  const auto find = [&](const std::string& name) -> const ParameterSlot* {
    for (const ParameterSlot& p : s)
      if (p.name == name) return &p;
    return nullptr;
  };
  const int64_t fe = c.moe.expert_ffn_dim;
  ASSERT_NE(find("model.layers.0.mlp.gate.weight"), nullptr);
  EXPECT_EQ(find("model.layers.0.mlp.gate.weight")->shape,
            (std::vector<int64_t>{c.moe.n_experts, c.dim}));
  EXPECT_EQ(find("model.layers.0.mlp.gate_proj.weight"), nullptr);
  const std::string last = fmt::format("model.layers.{}.mlp.experts.{}.down_proj.weight",
                                       c.n_layers - 1, c.moe.n_experts - 1);
  ASSERT_NE(find(last), nullptr);
  EXPECT_EQ(find(last)->shape, (std::vector<int64_t>{c.dim, fe}));
  EXPECT_EQ(find(last)->expert, c.moe.n_experts - 1);
  const ParameterSlot* a = find("model.layers.0.mlp.experts.0.up_proj.weight");
  const ParameterSlot* b = find("model.layers.0.mlp.experts.1.up_proj.weight");
  ASSERT_TRUE(a != nullptr && b != nullptr);
  EXPECT_NE(a->data, b->data);
  std::vector<float> va(static_cast<size_t>(a->numel()), 1.0f), vb(va.size(), 2.0f);
  const std::vector<WeightSource> src = {{a->name, a->shape, "float32", va.data()},
                                         {b->name, b->shape, "float32", vb.data()}};
  EXPECT_NO_THROW(check_weights(s, src));
}

TEST(WeightUpdate, Llama8bTableFromTheConfig) {
  const ModelConfig c = synthetic_config("llama-3.1-8b");
  const std::vector<ParameterSlot> s = parameter_slots(c, nullptr);
  EXPECT_EQ(s.size(), 3u + 32u * 9u);  // embed, norm, lm_head; 9 a layer (no bias, no q/k norm)
  int64_t n = 0;
  for (const ParameterSlot& p : s) n += p.numel();
  EXPECT_EQ(n, 8030261248);  // Llama-3.1-8B's parameter count
  EXPECT_EQ(s.back().name, "lm_head.weight");
  EXPECT_EQ(s.back().param, LlamaModel::Param::kLmHead);
  EXPECT_EQ(s[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(s[2].shape, (std::vector<int64_t>{4096, 4096}));
  EXPECT_EQ(s[3].shape, (std::vector<int64_t>{1024, 4096}));  // k_proj: 8 KV heads x 128
}

WeightSource device_source(const std::string& name, const std::vector<int64_t>& shape,
                           const void* data) {
  return {name, shape, "bfloat16", data, /*on_device=*/true};
}

TEST(WeightUpdate, TiedDeviceTensorsOneMemoryPassesTwoDoNot) {
  const ModelConfig c = synthetic_config("tiny-llama");  // tied embeddings
  const std::vector<ParameterSlot> slots = parameter_slots(c, nullptr);
  const std::vector<int64_t> shape = {c.vocab_size, c.dim};
  const char a = 0, b = 0;  // stand-ins for two device allocations (never read)
  const std::vector<WeightSource> same = {device_source("model.embed_tokens.weight", shape, &a),
                                          device_source("lm_head.weight", shape, &a)};
  const std::vector<size_t> index = check_weights(slots, same);
  EXPECT_EQ(slots[index[0]].param, LlamaModel::Param::kTokEmbd);
  EXPECT_EQ(slots[index[1]].param, LlamaModel::Param::kTokEmbd);  // the alias
  const std::vector<WeightSource> two = {device_source("model.embed_tokens.weight", shape, &a),
                                         device_source("lm_head.weight", shape, &b)};
  try {
    check_weights(slots, two);
    FAIL() << "two device tensors for one tied parameter were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tied embeddings"), std::string::npos) << e.what();
  }
}

TEST(WeightUpdate, EveryProblemIsNamedAndNothingIsWritten) {
  const ModelConfig c = synthetic_config("tiny-qwen2");
  ModelWeights w = make_synthetic_weights(c, 3);
  const std::vector<ParameterSlot> slots = parameter_slots(c, &w);
  const std::vector<float> before = w.layers[0].wq.bias;
  const std::vector<float> zeros(before.size(), 0.0f), three(3, 0.0f);
  const std::vector<WeightSource> bad = {
      {"model.layers.0.self_attn.q_proj.bias", {static_cast<int64_t>(zeros.size())}, "float32", zeros.data()},
      {"model.layers.0.self_attn.o_proj.bias", {3}, "float32", three.data()},  // Llama family: none
      {"model.norm.weight", {3}, "float32", three.data()},
      {"model.norm.weight", {3}, "int32", three.data()}};
  try {
    write_weights(slots, bad);
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("5 problems"), std::string::npos) << m;  // shape [3] twice
    EXPECT_NE(m.find("o_proj.bias: not a parameter"), std::string::npos) << m;
    EXPECT_NE(m.find("model.norm.weight: given more than once"), std::string::npos) << m;
    EXPECT_NE(m.find("dtype int32"), std::string::npos) << m;
    EXPECT_EQ(m.find("q_proj.bias"), std::string::npos) << m;  // the valid one is not named
  }
  EXPECT_EQ(w.layers[0].wq.bias, before);  // nothing written
}

}  // namespace
}  // namespace detllm
