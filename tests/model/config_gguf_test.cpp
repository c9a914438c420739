// ModelConfig::from_gguf: the same refusal rule as config.json — every key in the
// architecture's namespace is read, or refused by name; integers are range-checked before
// narrowing. Files are metadata-only GGUFs built here. Run: build/tests/test_model
// --gtest_filter='GgufConfig*'
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "model/config.h"
#include "model/gguf_writer.h"

namespace detllm {
namespace {

using Value = testing::GgufMetaValue;
using Metadata = std::vector<std::pair<std::string, Value>>;

// A GGUF v3 file with the given metadata and no tensors.
std::vector<uint8_t> gguf_bytes(const Metadata& kv) {
  return testing::gguf_file_bytes(kv, {});
}

Metadata smollm2_like() {
  return {{"general.architecture", std::string("llama")},
          {"general.name", std::string("test")},
          {"llama.block_count", uint32_t{30}},
          {"llama.context_length", uint32_t{8192}},
          {"llama.embedding_length", uint32_t{576}},
          {"llama.feed_forward_length", uint32_t{1536}},
          {"llama.attention.head_count", uint32_t{9}},
          {"llama.attention.head_count_kv", uint32_t{3}},
          {"llama.rope.freq_base", 100000.0f},
          {"llama.attention.layer_norm_rms_epsilon", 1e-5f},
          {"llama.vocab_size", uint32_t{49152}},
          {"llama.rope.dimension_count", uint32_t{64}},
          {"tokenizer.ggml.model", std::string("gpt2")}};
}

std::string refusal(const Metadata& kv) {
  const std::vector<uint8_t> bytes = gguf_bytes(kv);
  try {
    const auto f = GgufFile::parse(bytes.data(), bytes.size(), "test.gguf");
    (void)ModelConfig::from_gguf(*f);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

ModelConfig parse(const Metadata& kv) {
  const std::vector<uint8_t> bytes = gguf_bytes(kv);
  const auto f = GgufFile::parse(bytes.data(), bytes.size(), "test.gguf");
  return ModelConfig::from_gguf(*f);
}

Metadata with(Metadata kv, const std::string& key, Value v) {
  for (auto& [k, old] : kv) {
    if (k == key) {
      old = v;
      return kv;
    }
  }
  kv.emplace_back(key, v);
  return kv;
}

void expect_refused(const Metadata& kv, const std::vector<std::string>& fragments) {
  const std::string msg = refusal(kv);
  ASSERT_FALSE(msg.empty()) << "accepted";
  EXPECT_NE(msg.find("test.gguf"), std::string::npos) << msg;
  for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg;
}

TEST(GgufConfig, ReadsTheKnownKeys) {
  const ModelConfig c = parse(smollm2_like());
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.dim, 576);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_position, 8192);
  EXPECT_TRUE(c.tied_embeddings);
}

TEST(GgufConfig, AbsentFreqBaseIsLlamaCppsDefault) {
  Metadata kv = smollm2_like();
  std::erase_if(kv, [](const auto& e) { return e.first == "llama.rope.freq_base"; });
  EXPECT_EQ(parse(kv).rope_theta, 10000.0f);
}

TEST(GgufConfig, RefusesUnknownArchitectureKeysByName) {
  for (const char* key : {"llama.attention.sliding_window", "llama.final_logit_softcapping",
                          "llama.attention.layer_norm_epsilon", "llama.logit_scale",
                          "llama.rope.scaling.attn_factor"}) {
    expect_refused(with(smollm2_like(), key, 1.0f), {key, "not supported"});
  }
}

TEST(GgufConfig, RefusesPartialRope) {
  expect_refused(with(smollm2_like(), "llama.rope.dimension_count", uint32_t{32}),
                 {"llama.rope.dimension_count", "32", "partial RoPE"});
}

TEST(GgufConfig, RefusesValueHeadsOfAnotherSize) {
  expect_refused(with(smollm2_like(), "llama.attention.value_length", uint32_t{128}),
                 {"llama.attention.value_length", "128"});
}

// "llama" with experts is Mixtral (llama.cpp's converter writes it so): experts
// feed_forward_length wide, the k weights renormalised. Without expert_used_count it is refused.
TEST(GgufConfig, LlamaWithExpertsIsMixtral) {
  Metadata kv = with(smollm2_like(), "llama.expert_count", uint32_t{8});
  expect_refused(kv, {"llama.expert_used_count = 0", "between 1 and expert_count = 8"});
  const ModelConfig c = parse(with(kv, "llama.expert_used_count", uint32_t{2}));
  EXPECT_EQ(c.arch, ModelArch::kMixtral);
  EXPECT_EQ(c.moe.n_experts, 8);
  EXPECT_EQ(c.moe.n_experts_used, 2);
  EXPECT_EQ(c.moe.expert_ffn_dim, 1536);
  EXPECT_TRUE(c.moe.renormalize);
  EXPECT_EQ(refusal(with(smollm2_like(), "llama.expert_count", uint32_t{0})), "");
  expect_refused(with(smollm2_like(), "llama.expert_used_count", uint32_t{2}),
                 {"llama.expert_used_count", "declares no experts"});
  kv = with(kv, "llama.expert_used_count", uint32_t{2});
  expect_refused(with(kv, "llama.expert_feed_forward_length", uint32_t{512}),
                 {"llama.expert_feed_forward_length = 512", "feed_forward_length = 1536"});
}

Metadata as_arch(const Metadata& kv, const std::string& arch) {
  Metadata out;
  for (const auto& [k, v] : kv) {
    if (k == "general.architecture") {
      out.emplace_back(k, arch);
    } else if (k.rfind("llama.", 0) == 0) {
      out.emplace_back(arch + k.substr(5), v);
    } else {
      out.emplace_back(k, v);
    }
  }
  return out;
}

// qwen3moe / qwen2moe: the experts' width from expert_feed_forward_length (absent: llama.cpp's
// feed_forward_length / expert_used_count); the norm rule fixed per architecture.
TEST(GgufConfig, QwenMoeKeys) {
  Metadata kv = as_arch(smollm2_like(), "qwen3moe");
  kv = with(kv, "qwen3moe.expert_count", uint32_t{16});
  kv = with(kv, "qwen3moe.expert_used_count", uint32_t{4});
  ModelConfig c = parse(kv);
  EXPECT_EQ(c.arch, ModelArch::kQwen3Moe);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.moe.expert_ffn_dim, 1536 / 4);
  EXPECT_TRUE(c.moe.renormalize);
  c = parse(with(kv, "qwen3moe.expert_feed_forward_length", uint32_t{64}));
  EXPECT_EQ(c.moe.expert_ffn_dim, 64);
  EXPECT_EQ(c.moe.shared_expert_ffn_dim, 0);
  Metadata q2 = as_arch(kv, "qwen2moe");
  for (auto& [k, v] : q2) {
    if (k.rfind("qwen3moe.", 0) == 0) k = "qwen2moe." + k.substr(9);
  }
  c = parse(with(q2, "qwen2moe.expert_shared_feed_forward_length", uint32_t{96}));
  EXPECT_EQ(c.arch, ModelArch::kQwen2Moe);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.moe.renormalize);
  EXPECT_EQ(c.moe.shared_expert_ffn_dim, 96);
  EXPECT_EQ(parse(q2).moe.shared_expert_ffn_dim, 1536);  // llama.cpp's fallback
  expect_refused(with(q2, "qwen2moe.expert_weights_norm", true),
                 {"qwen2moe.expert_weights_norm = true", "does not renormalise"});
  // A MoE architecture without expert_count.
  expect_refused(as_arch(smollm2_like(), "olmoe"), {"olmoe.expert_count", "[1, 1024]"});
}

TEST(GgufConfig, RefusesMistralWithExperts) {
  Metadata kv = as_arch(smollm2_like(), "mistral");
  kv = with(kv, "mistral.expert_count", uint32_t{8});
  expect_refused(with(kv, "mistral.expert_used_count", uint32_t{2}),
                 {"mistral.expert_count", "llama.cpp writes Mixtral as llama"});
}

TEST(GgufConfig, RefusesNonCausalAttention) {
  expect_refused(with(smollm2_like(), "llama.attention.causal", false),
                 {"llama.attention.causal", "causal"});
}

TEST(GgufConfig, RefusesUnknownRopeScaling) {
  expect_refused(with(smollm2_like(), "llama.rope.scaling.type", std::string("yarn")),
                 {"llama.rope.scaling.type", "yarn", "linear"});
  Metadata linear = with(smollm2_like(), "llama.rope.scaling.type", std::string("linear"));
  expect_refused(linear, {"llama.rope.scaling.factor"});
  const ModelConfig c = parse(with(linear, "llama.rope.scaling.factor", 4.0f));
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c.rope_scaling.factor, 4.0f);
}

TEST(GgufConfig, RefusesSplitFiles) {
  expect_refused(with(smollm2_like(), "split.count", uint32_t{3}), {"split", "3"});
}

TEST(GgufConfig, IntegersAreRangeCheckedBeforeNarrowing) {
  expect_refused(with(smollm2_like(), "llama.embedding_length", uint64_t{1} << 40),
                 {"llama.embedding_length", "1099511627776", "range"});
  expect_refused(with(smollm2_like(), "llama.block_count", uint32_t{0}),
                 {"llama.block_count", "= 0", "range"});
}

}  // namespace
}  // namespace detllm
