// ModelConfig::from_hf_config: both formats transformers writes (≥ 5: rope_parameters + dtype;
// earlier: rope_theta + rope_scaling + torch_dtype) give the same ModelConfig and the same RoPE
// bits; absent keys take the architecture's documented default; every numerics setting that is
// not implemented is refused by name (one test each). Run: build/tests/test_model
// --gtest_filter='HfConfig*'
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/config.h"
#include "model/config_test_util.h"
#include "model/model_loader.h"

namespace detllm {
namespace {

using testing::expect_same_config;

using nlohmann::json;

// Llama-3.1-8B's config.json as transformers 5 writes it (save_pretrained).
json llama31_v5() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "dtype": "bfloat16", "eos_token_id": [128001, 128008, 128009],
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pad_token_id": null, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_parameters": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                        "original_max_position_embeddings": 8192, "rope_theta": 500000.0,
                        "rope_type": "llama3"},
    "tie_word_embeddings": false, "transformers_version": "5.17.0", "use_cache": true,
    "vocab_size": 128256})");
}

// The same model as transformers 4 wrote it.
json llama31_v4() {
  json j = llama31_v5();
  j.erase("rope_parameters");
  j.erase("dtype");
  j["torch_dtype"] = "bfloat16";
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = json::parse(R"({"factor": 8.0, "high_freq_factor": 4.0,
      "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"})");
  j["transformers_version"] = "4.43.0";
  return j;
}

ModelConfig parse(const json& j) {
  return ModelConfig::from_hf_config(j, "test/config.json");
}

// The message of the refusal, "" when accepted.
std::string refusal(const json& j) {
  try {
    (void)parse(j);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

void expect_refused(const json& j, const std::vector<std::string>& fragments) {
  const std::string msg = refusal(j);
  ASSERT_FALSE(msg.empty()) << "accepted: " << j.dump();
  EXPECT_NE(msg.find("test/config.json"), std::string::npos) << msg;
  for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg;
}

TEST(HfConfig, BothFormatsGiveTheSameConfig) {
  const ModelConfig v5 = parse(llama31_v5());
  const ModelConfig v4 = parse(llama31_v4());
  expect_same_config(v5, v4);
  // The bug this guards: the v5 file was read as rope_theta 10000 without scaling.
  EXPECT_EQ(v5.rope_theta, 500000.0f);
  EXPECT_EQ(v5.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(v5.rope_scaling.factor, 8.0f);
  EXPECT_EQ(v5.rope_scaling.original_max_position, 8192);
  EXPECT_EQ(v5.checkpoint_dtype, "bfloat16");
  EXPECT_EQ(v5.n_kv_heads, 8);
  EXPECT_EQ(v5.rms_eps, 1e-5f);
}

TEST(HfConfig, BothFormatsAgreeForEveryRopeType) {
  struct Case {
    json v5_rope, v4_theta, v4_scaling;
  };
  const std::vector<Case> cases = {
      {json::parse(R"({"rope_type": "default", "rope_theta": 1000000.0})"), 1000000.0, nullptr},
      {json::parse(R"({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0})"), 10000.0,
       json::parse(R"({"type": "linear", "factor": 4.0})")},
      {json::parse(R"({"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})"), 10000.0,
       json::parse(R"({"rope_type": "linear", "type": "linear", "factor": 2.0})")},
  };
  for (const Case& c : cases) {
    json v5 = llama31_v5(), v4 = llama31_v4();
    v5["rope_parameters"] = c.v5_rope;
    v4["rope_theta"] = c.v4_theta;
    v4["rope_scaling"] = c.v4_scaling;
    SCOPED_TRACE(c.v5_rope.dump());
    expect_same_config(parse(v5), parse(v4));
  }
}

TEST(HfConfig, PerLayerTypeRopeParametersOfFullAttention) {
  json j = llama31_v5();
  j["rope_parameters"] = json{{"full_attention", j["rope_parameters"]}};
  expect_same_config(parse(j), parse(llama31_v5()));
}

TEST(HfConfig, BothFormatsPresentMustAgree) {
  json j = llama31_v5();
  j["rope_theta"] = 500000.0;  // agrees
  EXPECT_EQ(parse(j).rope_theta, 500000.0f);
  j["rope_theta"] = 10000.0;
  expect_refused(j, {"rope_parameters", "rope_theta", "different"});
  json s = llama31_v5();
  s["rope_scaling"] = json::parse(R"({"rope_type": "linear", "factor": 8.0})");  // disagrees
  expect_refused(s, {"rope_parameters", "rope_scaling", "different"});
  json k = llama31_v5();
  k["torch_dtype"] = "float32";
  expect_refused(k, {"dtype", "torch_dtype", "bfloat16", "float32"});
}

TEST(HfConfig, AbsentKeysTakeTheArchitecturesDefaults) {
  const json llama = json::parse(R"({"model_type": "llama", "vocab_size": 100,
      "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128})");
  const ModelConfig l = parse(llama);
  EXPECT_EQ(l.rope_theta, 10000.0f);
  EXPECT_EQ(l.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(l.n_kv_heads, 4);  // = num_attention_heads
  EXPECT_EQ(l.head_dim, 16);   // = hidden_size / num_attention_heads
  EXPECT_EQ(l.max_position, 2048);
  EXPECT_EQ(l.rms_eps, 1e-6f);
  EXPECT_FALSE(l.tied_embeddings);

  json mistral = llama;
  mistral["model_type"] = "mistral";
  mistral["num_attention_heads"] = 16;
  const ModelConfig m = parse(mistral);
  EXPECT_EQ(m.n_kv_heads, 8);           // Mistral's default, not num_attention_heads
  EXPECT_EQ(m.sliding_window, 4096);    // on by default
  EXPECT_EQ(m.max_position, 4096);      // capped to the window (131072 by default)
  mistral["sliding_window"] = nullptr;  // null: no window
  EXPECT_EQ(parse(mistral).max_position, 131072);
  EXPECT_EQ(parse(mistral).sliding_window, 0);

  // Qwen's num_key_value_heads defaults to 32, not to num_attention_heads.
  json qwen3 = llama;
  qwen3["model_type"] = "qwen3";
  qwen3["num_attention_heads"] = 32;
  const ModelConfig q = parse(qwen3);
  EXPECT_EQ(q.head_dim, 128);  // Qwen3's default head_dim is fixed, not hidden / heads
  EXPECT_EQ(q.n_kv_heads, 32);
  EXPECT_EQ(q.max_position, 32768);
  EXPECT_TRUE(q.qk_norm);
  EXPECT_EQ(q.sliding_window, 0);  // use_sliding_window defaults to false

  json qwen2 = llama;
  qwen2["model_type"] = "qwen2";
  qwen2["num_attention_heads"] = 32;
  qwen2["sliding_window"] = 131072;  // as Qwen2.5 writes it, with use_sliding_window false
  qwen2["max_window_layers"] = 28;
  qwen2["use_sliding_window"] = false;
  const ModelConfig q2 = parse(qwen2);
  EXPECT_TRUE(q2.qkv_bias);
  EXPECT_EQ(q2.sliding_window, 0);
  EXPECT_EQ(q2.max_position, 32768);
}

TEST(HfConfig, QwenSlidingWindowCapsTheContext) {
  json j = llama31_v5();
  j.erase("rope_parameters");
  j["model_type"] = "qwen2";
  j["use_sliding_window"] = true;
  j["sliding_window"] = 1024;
  j["max_window_layers"] = 1;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.sliding_window, 1024);
  EXPECT_EQ(c.max_position, 1024);
  j["max_window_layers"] = 32;  // no layer from 32 on: no window
  EXPECT_EQ(parse(j).sliding_window, 0);
  j["layer_types"] = json::array();
  for (int i = 0; i < 32; ++i)
    j["layer_types"].push_back(i == 5 ? "sliding_attention" : "full_attention");
  EXPECT_EQ(parse(j).sliding_window, 1024);
  j["layer_types"][3] = "chunked_attention";
  expect_refused(j, {"layer_types", "chunked_attention"});
}

TEST(HfConfig, RefusesUnknownRopeType) {
  for (const char* type : {"yarn", "longrope", "su", "mrope"}) {
    json j = llama31_v5();
    j["rope_parameters"]["rope_type"] = type;
    expect_refused(j, {"rope_parameters.rope_type", type, "supported: default, linear, llama3"});
  }
}

TEST(HfConfig, RefusesDynamicRopeScaling) {
  json j = llama31_v4();
  j["rope_scaling"] = json::parse(R"({"type": "dynamic", "factor": 2.0})");
  expect_refused(j, {"rope_scaling", "dynamic", "sequence length"});
}

TEST(HfConfig, RefusesUnknownRopeParameter) {
  json j = llama31_v5();
  j["rope_parameters"]["attention_factor"] = 1.5;
  expect_refused(j, {"rope_parameters.attention_factor", "1.5", "llama3"});
}

TEST(HfConfig, RefusesIncompleteLlama3Rope) {
  json j = llama31_v5();
  j["rope_parameters"].erase("low_freq_factor");
  expect_refused(j, {"llama3", "low_freq_factor"});
}

TEST(HfConfig, RefusesSlidingWindowOnLlama) {
  json j = llama31_v5();
  j["sliding_window"] = 4096;
  expect_refused(j, {"sliding_window", "4096", "Llama"});
}

TEST(HfConfig, RefusesAttentionBiasWhereTheArchitectureHasNone) {
  for (const char* type : {"llama", "qwen3"}) {
    json j = llama31_v5();
    j["model_type"] = type;
    j["attention_bias"] = true;
    expect_refused(j, {"attention_bias", "true", "output projection"});
  }
}

TEST(HfConfig, RefusesMlpBias) {
  json j = llama31_v5();
  j["mlp_bias"] = true;
  expect_refused(j, {"mlp_bias", "true"});
}

TEST(HfConfig, RefusesPartialRotaryFactor) {
  json j = llama31_v5();
  j["partial_rotary_factor"] = 0.5;
  expect_refused(j, {"partial_rotary_factor", "0.5"});
  j["partial_rotary_factor"] = 1.0;  // the whole head: what is implemented
  EXPECT_EQ(refusal(j), "");
}

TEST(HfConfig, RefusesLogitSoftcapping) {
  for (const char* key :
       {"final_logit_softcapping", "attn_logit_softcapping", "logit_softcapping"}) {
    json j = llama31_v5();
    j[key] = 30.0;
    expect_refused(j, {key, "30", "soft-capping"});
    j[key] = nullptr;  // null: off, as transformers writes it
    EXPECT_EQ(refusal(j), "") << key;
  }
}

TEST(HfConfig, RefusesOtherActivations) {
  json j = llama31_v5();
  j["hidden_act"] = "gelu";
  expect_refused(j, {"hidden_act", "gelu", "silu"});
}

TEST(HfConfig, RefusesQuantizedCheckpoints) {
  json j = llama31_v5();
  j["quantization_config"] = json::parse(R"({"quant_method": "gptq", "bits": 4})");
  expect_refused(j, {"quantization_config", "gptq"});
}

TEST(HfConfig, RefusesRemoteCode) {
  json j = llama31_v5();
  j["auto_map"] = json::parse(R"({"AutoModelForCausalLM": "modeling_x.XForCausalLM"})");
  expect_refused(j, {"auto_map", "modelling code"});
}

TEST(HfConfig, RefusesUnknownDtype) {
  json j = llama31_v5();
  j["dtype"] = "float8_e4m3fn";
  expect_refused(j, {"dtype", "float8_e4m3fn", "bfloat16"});
}

TEST(HfConfig, RefusesUnknownKeysByName) {
  json j = llama31_v5();
  j["embedding_multiplier"] = 12.0;
  expect_refused(j, {"'embedding_multiplier'", "12.0", "not supported"});
  json k = llama31_v5();
  k["num_experts"] = 8;
  expect_refused(k, {"'num_experts'"});
}

TEST(HfConfig, IgnoredKeysAreAccepted) {
  json j = llama31_v5();
  j["_name_or_path"] = "meta-llama/Llama-3.1-8B";
  j["temperature"] = 0.6;
  j["use_cache"] = false;
  j["unsloth_version"] = "2026.1";
  EXPECT_EQ(refusal(j), "");
}

TEST(HfConfig, IntegersAreRangeCheckedBeforeNarrowing) {
  json j = llama31_v5();
  j["hidden_size"] = int64_t{1} << 40;  // wrapped to 0 before, and was reported as "got 0"
  expect_refused(j, {"hidden_size", "1099511627776", "range"});
  json k = llama31_v5();
  k["vocab_size"] = -5;
  expect_refused(k, {"vocab_size", "-5", "range"});
  json u = llama31_v5();
  u["num_hidden_layers"] = uint64_t{18446744073709551615u};
  expect_refused(u, {"num_hidden_layers", "18446744073709551615"});
  json f = llama31_v5();
  f["intermediate_size"] = 14336.5;
  expect_refused(f, {"intermediate_size", "integer"});
  json s = llama31_v5();
  s["num_attention_heads"] = "32";
  expect_refused(s, {"num_attention_heads", "\"32\"", "integer"});
  json ok = llama31_v5();
  ok["intermediate_size"] = 14336.0;  // an integral float is the same number
  EXPECT_EQ(parse(ok).ffn_dim, 14336);
}

TEST(HfConfig, ConfigJsonThatIsADirectoryIsAClearError) {
  const auto dir = std::filesystem::temp_directory_path() / "detllm-config-dir-test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "config.json");
  try {
    (void)load_model(dir.string(), {}, LoadParts::kConfigOnly);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace detllm
