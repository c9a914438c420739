// Mixture-of-experts models: their config.json keys (read, ignored or refused by name), the
// refusal of a backend that cannot run them, and the invariance of a token's logits to the
// other tokens of the step (which experts they choose, how many share its experts).
// Golden logits against transformers: hf_checkpoint_test.cpp; the conformance suite:
// tests/conformance (tiny-qwen3-moe). Run: build/tests/test_model --gtest_filter='Moe*'
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "conformance/delegating_ops.h"
#include "core/error.h"
#include "model/config.h"
#include "model/llama_model.h"
#include "model/solo_runner.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

using nlohmann::json;

const std::string kDir = std::string(DETLLM_SOURCE_DIR) + "/tests/data/loaders/hf_v5/";

json config_of(const char* c) {
  std::ifstream in(kDir + c + "/config.json");
  return json::parse(in);
}

std::string refusal(const json& j) {
  try {
    (void)ModelConfig::from_hf_config(j, "test/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_refused(const json& j, const std::vector<std::string>& fragments) {
  const std::string msg = refusal(j);
  ASSERT_FALSE(msg.empty()) << "accepted: " << j.dump();
  for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg;
}

TEST(MoeConfig, ReadsEveryArchitecture) {
  const ModelConfig q3 = ModelConfig::from_hf_config(config_of("qwen3_moe"), "q3");
  EXPECT_EQ(q3.arch, ModelArch::kQwen3Moe);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.moe.n_experts, 16);
  EXPECT_EQ(q3.moe.n_experts_used, 4);
  EXPECT_EQ(q3.moe.expert_ffn_dim, 32);
  EXPECT_TRUE(q3.moe.renormalize);
  const ModelConfig mx = ModelConfig::from_hf_config(config_of("mixtral"), "mixtral");
  EXPECT_EQ(mx.arch, ModelArch::kMixtral);
  EXPECT_EQ(mx.moe.n_experts, 8);
  EXPECT_EQ(mx.moe.n_experts_used, 2);
  EXPECT_TRUE(mx.moe.renormalize);  // Mixtral: softmax over the chosen logits
  const ModelConfig q2 = ModelConfig::from_hf_config(config_of("qwen2_moe"), "q2");
  EXPECT_EQ(q2.arch, ModelArch::kQwen2Moe);
  EXPECT_TRUE(q2.qkv_bias);
  EXPECT_EQ(q2.moe.shared_expert_ffn_dim, 48);
  EXPECT_FALSE(q2.moe.renormalize);
  EXPECT_EQ(q2.sliding_window, 0);  // transformers writes sliding_window 0: none
}

// The hub's Qwen3-MoE configs say num_experts; transformers 5 writes num_local_experts.
TEST(MoeConfig, EitherExpertCountKeyAndTheyMustAgree) {
  json j = config_of("qwen3_moe");
  j["num_experts"] = j["num_local_experts"];
  EXPECT_EQ(ModelConfig::from_hf_config(j, "x").moe.n_experts, 16);
  j.erase("num_local_experts");
  EXPECT_EQ(ModelConfig::from_hf_config(j, "x").moe.n_experts, 16);
  j["num_local_experts"] = 8;
  expect_refused(j, {"num_experts", "num_local_experts"});
}

TEST(MoeConfig, TrainingOnlyKeysAreIgnoredByName) {
  json j = config_of("mixtral");
  j["router_aux_loss_coef"] = 0.02;
  j["output_router_logits"] = true;
  j["router_jitter_noise"] = 0.1;  // transformers applies it only in training mode
  EXPECT_NO_THROW(ModelConfig::from_hf_config(j, "x"));
}

TEST(MoeConfig, RefusesDenseLayersBetweenSparseOnes) {
  json j = config_of("qwen3_moe");
  j["decoder_sparse_step"] = 2;
  expect_refused(j, {"decoder_sparse_step", "2", "dense MLP"});
  j = config_of("qwen2_moe");
  j["mlp_only_layers"] = {0};
  expect_refused(j, {"mlp_only_layers", "[0]"});
}

TEST(MoeConfig, RefusesMoreExpertsPerTokenThanExperts) {
  json j = config_of("qwen3_moe");
  j["num_experts_per_tok"] = 17;
  expect_refused(j, {"num_experts_per_tok", "17"});
}

TEST(MoeConfig, RefusesQwen2MoeWithoutItsBias) {
  json j = config_of("qwen2_moe");
  j["qkv_bias"] = false;
  expect_refused(j, {"qkv_bias", "false"});
}

// OLMoE: q/k norms over the whole projections; what it has and this engine does not run —
// clip_qkv, attention biases, heads that do not fill hidden_size (its q norm is hidden_size
// wide) — is refused by name.
TEST(MoeConfig, OlmoeNormsSpanTheWholeProjectionAndItsExtrasAreRefused) {
  const json base = config_of("olmoe");
  const ModelConfig c = ModelConfig::from_hf_config(base, "olmoe");
  EXPECT_EQ(c.arch, ModelArch::kOlmoe);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.qk_norm_full);
  EXPECT_EQ(c.q_norm_dim(), c.n_heads * c.head_dim);
  EXPECT_EQ(c.k_norm_dim(), c.n_kv_heads * c.head_dim);
  EXPECT_EQ(c.moe.n_experts, 16);
  EXPECT_EQ(c.moe.n_experts_used, 4);
  EXPECT_EQ(c.moe.expert_ffn_dim, c.ffn_dim);  // no moe_intermediate_size
  EXPECT_FALSE(c.moe.renormalize);
  json j = base;
  j["clip_qkv"] = 8.0;
  expect_refused(j, {"clip_qkv", "8"});
  j = base;
  j["clip_qkv"] = nullptr;  // off
  EXPECT_NO_THROW((void)ModelConfig::from_hf_config(j, "olmoe"));
  j = base;
  j["attention_bias"] = true;
  expect_refused(j, {"attention_bias"});
  j = base;
  j["head_dim"] = 32;
  expect_refused(j, {"head_dim", "hidden_size"});
}

TEST(MoeConfig, RefusesMoeKeysOnADenseArchitecture) {
  json j = config_of("qwen3_moe");
  j["model_type"] = "qwen3";
  expect_refused(j, {"not supported"});
  j = config_of("mixtral");
  j["norm_topk_prob"] = false;  // Mixtral has no such key: it always renormalises
  expect_refused(j, {"norm_topk_prob"});
}

// A backend that keeps its memory off the host (as CUDA does): MoeFfn groups through
// Ops::moe_group into backend memory, runs Ops::matmul_grouped_device on offsets it never
// reads itself, records the routing in a backend table downloaded after the last layer, and
// (as LlamaModel places weights for a device) runs each expert's gate and up fused. Here the
// "device" is the CPU backend behind a host_memory() of false: that path must give the CPU
// path's bits and routing.
class DeviceLikeOps final : public conformance::DelegatingOps {
 public:
  explicit DeviceLikeOps(DType gemm_input = DType::kF32)
      : DelegatingOps(1, "device-like"), gemm_input_(gemm_input) {}
  bool host_memory() const override { return false; }
  DType gemm_input_dtype() const override { return gemm_input_; }
  void moe_route(const float* logits, int32_t n, int32_t n_experts, int32_t k, bool renormalize,
                 int32_t* experts, float* weights) override {
    inner_->moe_route(logits, n, n_experts, k, renormalize, experts, weights);
  }
  void moe_group(const int32_t* experts, int32_t n, int32_t k, int32_t n_experts,
                 int32_t* offsets, int32_t* src_row, int32_t* rows) override {
    inner_->moe_group(experts, n, k, n_experts, offsets, src_row, rows);
  }
  void moe_combine(const float* y, const int32_t* rows, const float* weights, int32_t n,
                   int32_t k, int32_t dim, const float* shared, const float* shared_gate,
                   float* out) override {
    inner_->moe_combine(y, rows, weights, n, k, dim, shared, shared_gate, out);
  }

 private:
  DType gemm_input_;
};

TEST(MoeModel, ADeviceMemoryBackendGroupsOnTheHostWithTheSameBits) {
  const ModelConfig c = synthetic_config("tiny-qwen3-moe");
  const ModelWeights w = make_synthetic_weights(c, 42);
  const std::vector<int32_t> prompt = {5, 17, 300, 42, 8, 99, 1, 260, 5, 5, 17, 511};
  auto cpu = kernels::make_cpu_ops(1);
  DeviceLikeOps device;
  LlamaModel on_cpu(c, w, *cpu), on_device(c, w, device);
  SoloRunner a(on_cpu, 16), b(on_device, 16);
  const std::vector<float> want = a.feed(prompt, /*all_logits=*/true);
  const std::vector<float> got = b.feed(prompt, /*all_logits=*/true);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  for (int32_t row = 0; row < static_cast<int32_t>(prompt.size()); ++row) {
    const auto x = on_cpu.routed_experts(row), y = on_device.routed_experts(row);
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << "row " << row;
  }
}

// GEMM inputs other than fp32 and bf16 are refused by name.
TEST(MoeModel, RefusesAGemmInputDtypeItCannotGather) {
  const ModelConfig c = synthetic_config("tiny-qwen3-moe");
  const ModelWeights w = make_synthetic_weights(c, 42);
  DeviceLikeOps ops(DType::kF16);
  try {
    LlamaModel model(c, w, ops);
    FAIL() << "a MoE model was built on a backend with f16 GEMM inputs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GEMM inputs of f16"), std::string::npos) << e.what();
  }
}

// A prompt's logits are the same bits prefilled at once (each expert's group holds many of
// its tokens) and fed one token at a time (every group of one row). Neighbours from other
// requests in the step: the conformance suite's V1 on tiny-qwen3-moe.
TEST(MoeModel, PrefillEqualsOneTokenAtATime) {
  const ModelConfig c = synthetic_config("tiny-qwen3-moe");
  const ModelWeights w = make_synthetic_weights(c, 42);
  auto ops = kernels::make_cpu_ops(2);
  LlamaModel model(c, w, *ops);
  const std::vector<int32_t> a = {5, 17, 300, 42, 8, 99, 1, 260, 5, 5, 17, 511};
  std::vector<float> alone;
  {
    SoloRunner runner(model, 16);
    alone = runner.feed(a, /*all_logits=*/true);
  }
  SoloRunner one_by_one(model, 16);
  std::vector<float> last;
  std::vector<float> stepwise;
  for (int32_t t : a) {
    last = one_by_one.feed(std::span<const int32_t>(&t, 1), /*all_logits=*/true);
    stepwise.insert(stepwise.end(), last.begin(), last.end());
  }
  ASSERT_EQ(stepwise.size(), alone.size());
  EXPECT_EQ(std::memcmp(stepwise.data(), alone.data(), alone.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace detllm
