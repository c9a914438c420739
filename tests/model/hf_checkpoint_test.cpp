// Checkpoints as transformers >= 5 writes them (scripts/ref/hf_checkpoints.py, run once on a
// machine with transformers; files under tests/data/loaders/): their config.json
// (rope_parameters, dtype) loads, the forward pass matches transformers' fp32 logits on the
// same saved file at every position and over the whole vocabulary, greedy continuations agree,
// and the same checkpoint with its config rewritten into the earlier format (rope_theta +
// rope_scaling, torch_dtype) gives bit-identical logits. Also: our table of architecture
// defaults equals the defaults transformers writes. The mixture-of-experts cases: Qwen3-MoE
// (16 experts, top-4, renormalised), Qwen3-MoE with exact router ties (router rows repeating
// with period 4, top-6: the reference breaks ties by the lower expert index, as detllm does;
// the other rule moves its logits by 0.016, far outside the tolerance), Mixtral (8 experts,
// top-2), Qwen2-MoE (a sigmoid-gated shared expert) and OLMoE (q/k RMSNorm over the whole q
// and k projections, not per head). Run: build/tests/test_model
// --gtest_filter='HfCheckpoint*'
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kernels/ops.h"
#include "model/checkpoint_test_util.h"
#include "model/llama_model.h"
#include "model/model_loader.h"
#include "model/solo_runner.h"

namespace detllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kData = fs::path(DETLLM_SOURCE_DIR) / "tests" / "data" / "loaders";
const char* const kCases[] = {"llama31",        "qwen2_linear", "qwen3",     "qwen3_moe",
                              "qwen3_moe_ties", "mixtral",      "qwen2_moe", "olmoe"};

// |ours - transformers| <= kAbsTol + kRelTol * |theirs|. Both sides run fp32 on bf16-exact
// weights through 2 layers, reducing in different orders. The worst difference measured over
// the three checkpoints and every logit is 1.34e-5 (2026-12-01, CPU backend, 2 threads); the
// bound is 5e-5 + 1e-5 |theirs|, ~4x that. A wrong RoPE base (10000 instead of 500000, the
// bug these files guard) moves logits by 3.5e-4 at position 1 and fails here.
constexpr float kAbsTol = 5e-5f;
constexpr float kRelTol = 1e-5f;

using checkpoint_testing::all_logits;
using checkpoint_testing::load;
using checkpoint_testing::Loaded;
using checkpoint_testing::read_f32;
using checkpoint_testing::read_json;

TEST(HfCheckpoint, FixturesArePresent) {
  for (const char* c : kCases) {
    const json g = read_json(kData / "hf_v5" / c / "golden.json");
    ASSERT_FALSE(g["sequences"].empty()) << c << ": a golden file with no sequences proves nothing";
    const json cfg = read_json(kData / "hf_v5" / c / "config.json");
    EXPECT_TRUE(cfg.contains("rope_parameters")) << c << " is not in the transformers >= 5 format";
    EXPECT_FALSE(cfg.contains("rope_scaling")) << c;
  }
}

TEST(HfCheckpoint, PromptLogitsMatchTransformersOverTheWholeVocabulary) {
  float worst = 0;
  for (const char* c : kCases) {
    SCOPED_TRACE(c);
    const fs::path dir = kData / "hf_v5" / c;
    const json g = read_json(dir / "golden.json");
    const std::vector<float> ref = read_f32(dir / "logits.f32");
    const Loaded l = load(dir);
    const size_t vocab = static_cast<size_t>(l.model->config.vocab_size);
    ASSERT_EQ(vocab, g["vocab_size"].get<size_t>());
    size_t offset = 0;
    for (const auto& s : g["sequences"]) {
      const auto ids = s["tokens"].get<std::vector<int32_t>>();
      const std::vector<float> ours = all_logits(l, ids);
      ASSERT_EQ(ours.size(), ids.size() * vocab);
      ASSERT_LE(offset + ours.size(), ref.size()) << "logits.f32 is shorter than golden.json says";
      for (size_t i = 0; i < ours.size(); ++i) {
        const float theirs = ref[offset + i];
        const float diff = std::fabs(ours[i] - theirs);
        worst = std::max(worst, diff);
        ASSERT_LE(diff, kAbsTol + kRelTol * std::fabs(theirs))
            << "position " << i / vocab << " token " << i % vocab << ": ours " << ours[i]
            << ", transformers " << theirs;
      }
      offset += ours.size();
    }
    EXPECT_EQ(offset, ref.size()) << "logits.f32 holds more rows than golden.json's sequences";
  }
  std::printf("worst |ours - transformers| logit difference: %.3g\n", worst);
}

TEST(HfCheckpoint, GreedyTokensMatchTransformers) {
  for (const char* c : kCases) {
    SCOPED_TRACE(c);
    const fs::path dir = kData / "hf_v5" / c;
    const json g = read_json(dir / "golden.json");
    const Loaded l = load(dir);
    for (const auto& s : g["sequences"]) {
      const auto ids = s["tokens"].get<std::vector<int32_t>>();
      const auto expected = s["greedy"].get<std::vector<int32_t>>();
      ASSERT_FALSE(expected.empty());
      SoloRunner runner(*l.llama, static_cast<int32_t>(ids.size() + expected.size()) + 1);
      std::vector<float> logits = runner.feed(ids);
      std::vector<int32_t> got;
      for (size_t step = 0; step < expected.size(); ++step) {
        const auto best = static_cast<int32_t>(
            std::max_element(logits.begin(), logits.end()) - logits.begin());
        got.push_back(best);
        logits = runner.feed(std::span<const int32_t>(&best, 1));
      }
      EXPECT_EQ(got, expected);
    }
  }
}

// The same weights with config.json rewritten as transformers 4 wrote it.
fs::path legacy_copy(const char* c) {
  const fs::path src = kData / "hf_v5" / c;
  const fs::path dst = fs::temp_directory_path() / (std::string("detllm-legacy-") + c);
  fs::remove_all(dst);
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) {
    if (e.path().extension() == ".safetensors" || e.path().filename() ==
        "model.safetensors.index.json") {
      fs::create_symlink(e.path(), dst / e.path().filename());
    }
  }
  json cfg = read_json(src / "config.json");
  json rope = cfg["rope_parameters"];
  cfg.erase("rope_parameters");
  cfg["rope_theta"] = rope["rope_theta"];
  rope.erase("rope_theta");
  if (rope["rope_type"] == "default") {
    cfg["rope_scaling"] = nullptr;
  } else {
    rope["type"] = rope["rope_type"];
    cfg["rope_scaling"] = rope;
  }
  if (cfg.contains("dtype")) {
    cfg["torch_dtype"] = cfg["dtype"];
    cfg.erase("dtype");
  }
  std::ofstream(dst / "config.json") << cfg.dump(2);
  return dst;
}

TEST(HfCheckpoint, EarlierConfigFormatGivesIdenticalLogits) {
  for (const char* c : kCases) {
    SCOPED_TRACE(c);
    const fs::path dir = kData / "hf_v5" / c;
    const json g = read_json(dir / "golden.json");
    const Loaded modern = load(dir);
    const fs::path legacy_dir = legacy_copy(c);
    const Loaded legacy = load(legacy_dir);
    EXPECT_EQ(modern.model->weights_hash, legacy.model->weights_hash);
    EXPECT_EQ(modern.model->config.rope_theta, legacy.model->config.rope_theta);
    EXPECT_EQ(modern.model->config.rope_scaling.type, legacy.model->config.rope_scaling.type);
    const auto ids = g["sequences"][0]["tokens"].get<std::vector<int32_t>>();
    const std::vector<float> a = all_logits(modern, ids), b = all_logits(legacy, ids);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    fs::remove_all(legacy_dir);
  }
}

// The ties case really ties: its router rows repeat with period 4 in every layer, and every
// MoE case loads as the mixture its config declares.
TEST(HfCheckpoint, MoeCasesLoadTheirExperts) {
  const Loaded ties = load(kData / "hf_v5" / "qwen3_moe_ties");
  const ModelConfig& c = ties.model->config;
  EXPECT_EQ(c.moe.n_experts, 16);
  EXPECT_EQ(c.moe.n_experts_used, 6);
  EXPECT_FALSE(c.moe.renormalize);
  for (const LayerWeights& l : ties.model->weights.layers) {
    ASSERT_EQ(l.router.w.shape, (std::vector<int64_t>{16, c.dim}));
    const size_t row = l.router.w.n_bytes() / 16;
    const auto* bytes = static_cast<const uint8_t*>(l.router.w.ptr());
    for (size_t e = 4; e < 16; ++e)
      EXPECT_EQ(std::memcmp(bytes + e * row, bytes + (e % 4) * row, row), 0) << "router row " << e;
  }
  const Loaded mixtral = load(kData / "hf_v5" / "mixtral");
  EXPECT_EQ(mixtral.model->config.arch, ModelArch::kMixtral);
  EXPECT_TRUE(mixtral.model->config.moe.renormalize);
  EXPECT_EQ(mixtral.model->config.moe.expert_ffn_dim, mixtral.model->config.ffn_dim);
  const Loaded qwen2 = load(kData / "hf_v5" / "qwen2_moe");
  EXPECT_EQ(qwen2.model->config.moe.shared_expert_ffn_dim, 48);
  EXPECT_EQ(qwen2.model->weights.layers[0].shared_expert_gate.w.shape,
            (std::vector<int64_t>{1, 64}));
}

// Each architecture's default config, as transformers writes it whole, parses; and a config of
// model_type alone gives the values transformers' defaults hold.
TEST(HfCheckpoint, DefaultsEqualTheOnesTransformersWrites) {
  const json d = read_json(kData / "hf_config_defaults.json");
  for (const char* mt :
       {"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "qwen2_moe", "olmoe"}) {
    SCOPED_TRACE(mt);
    const json& ref = d[mt];
    ASSERT_TRUE(ref.is_object());
    ModelConfig whole;
    ASSERT_NO_THROW(whole = ModelConfig::from_hf_config(ref, std::string(mt) + "/defaults"));
    const ModelConfig bare = ModelConfig::from_hf_config(json{{"model_type", mt}}, mt);
    for (const ModelConfig* c : {static_cast<const ModelConfig*>(&whole), &bare}) {
      EXPECT_EQ(c->vocab_size, ref["vocab_size"].get<int32_t>());
      EXPECT_EQ(c->dim, ref["hidden_size"].get<int32_t>());
      EXPECT_EQ(c->ffn_dim, ref["intermediate_size"].get<int32_t>());
      EXPECT_EQ(c->n_layers, ref["num_hidden_layers"].get<int32_t>());
      EXPECT_EQ(c->n_heads, ref["num_attention_heads"].get<int32_t>());
      EXPECT_EQ(c->n_kv_heads, ref["num_key_value_heads"].get<int32_t>());
      const int32_t head_dim = ref.contains("head_dim") && !ref["head_dim"].is_null()
                                   ? ref["head_dim"].get<int32_t>()
                                   : ref["hidden_size"].get<int32_t>() /
                                         ref["num_attention_heads"].get<int32_t>();
      EXPECT_EQ(c->head_dim, head_dim);
      EXPECT_EQ(c->rms_eps, ref["rms_norm_eps"].get<float>());
      EXPECT_EQ(c->tied_embeddings, ref["tie_word_embeddings"].get<bool>());
      const json& rope = ref["rope_parameters"];
      EXPECT_EQ(c->rope_theta, rope["rope_theta"].get<float>());
      EXPECT_EQ(rope["rope_type"], "default");
      EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);
      int64_t window = 0;
      if (ref.contains("sliding_window") && !ref["sliding_window"].is_null() &&
          ref.value("use_sliding_window", true)) {
        window = ref["sliding_window"].get<int64_t>();
      }
      EXPECT_EQ(c->sliding_window, window);
      const int64_t max_pos = ref["max_position_embeddings"].get<int64_t>();
      EXPECT_EQ(c->max_position, window > 0 ? std::min(window, max_pos) : max_pos);
      if (!ref.contains("num_experts_per_tok")) {
        EXPECT_FALSE(c->moe.active());
        continue;
      }
      const json& n_experts =
          ref.contains("num_experts") ? ref["num_experts"] : ref["num_local_experts"];
      EXPECT_EQ(c->moe.n_experts, n_experts.get<int32_t>());
      EXPECT_EQ(c->moe.n_experts_used, ref["num_experts_per_tok"].get<int32_t>());
      EXPECT_EQ(c->moe.expert_ffn_dim,
                ref.value("moe_intermediate_size", ref["intermediate_size"].get<int32_t>()));
      EXPECT_EQ(c->moe.renormalize, ref.value("norm_topk_prob", true));
      EXPECT_EQ(c->moe.shared_expert_ffn_dim, ref.value("shared_expert_intermediate_size", 0));
    }
  }
}

}  // namespace
}  // namespace detllm
