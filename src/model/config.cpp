// ModelConfig parsing (GGUF metadata, HF config.json), validation and RoPE frequencies.
#include "model/config.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "model/gguf.h"

namespace detllm {

std::string_view model_arch_name(ModelArch arch) {
  switch (arch) {
    case ModelArch::kLlama: return "llama";
    case ModelArch::kMistral: return "mistral";
    case ModelArch::kQwen2: return "qwen2";
    case ModelArch::kQwen3: return "qwen3";
  }
  return "?";
}

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](int64_t v, const char* field) {
    check(v > 0, "{}: model config field {} must be positive, got {}", source, field, v);
  };
  positive(vocab_size, "vocab_size");
  positive(dim, "hidden size");
  positive(n_layers, "n_layers");
  positive(n_heads, "n_heads");
  positive(n_kv_heads, "n_kv_heads");
  positive(head_dim, "head_dim");
  positive(ffn_dim, "ffn_dim");
  positive(max_position, "max_position");
  check(n_heads % n_kv_heads == 0, "{}: n_heads ({}) must be a multiple of n_kv_heads ({})",
        source, n_heads, n_kv_heads);
  check(head_dim % 2 == 0 && head_dim <= 512, "{}: unsupported head_dim {}", source, head_dim);
  check(vocab_size <= (1 << 24) && dim <= (1 << 16) && ffn_dim <= (1 << 18) && n_layers <= 1024,
        "{}: model dimensions out of the supported range", source);
  check(std::isfinite(rms_eps) && rms_eps > 0 && rms_eps < 1, "{}: bad rms_norm_eps {}", source,
        rms_eps);
  check(std::isfinite(rope_theta) && rope_theta > 1, "{}: bad rope_theta {}", source, rope_theta);
  if (rope_scaling.type != RopeScaling::Type::kNone) {
    check(rope_scaling.factor >= 1 && std::isfinite(rope_scaling.factor),
          "{}: bad rope scaling factor {}", source, rope_scaling.factor);
  }
  if (rope_scaling.type == RopeScaling::Type::kLlama3) {
    check(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor &&
              rope_scaling.low_freq_factor > 0 && rope_scaling.original_max_position > 0,
          "{}: bad llama3 rope scaling parameters", source);
  }
}

kernels::RopeTable ModelConfig::rope_table() const {
  kernels::RopeTable table;
  table.rot_dim = head_dim;
  const int32_t half = head_dim / 2;
  table.inv_freq.resize(half);
  for (int32_t i = 0; i < half; ++i) {
    // HF: 1 / base ** (arange(0, dim, 2).float() / dim), in fp32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    table.inv_freq[i] = 1.0f / std::pow(rope_theta, exponent);
  }
  if (rope_scaling.type == RopeScaling::Type::kLinear) {
    for (float& f : table.inv_freq) f /= rope_scaling.factor;
  } else if (rope_scaling.type == RopeScaling::Type::kLlama3) {
    const auto& s = rope_scaling;
    const float old_len = static_cast<float>(s.original_max_position);
    const float low_wavelen = old_len / s.low_freq_factor;
    const float high_wavelen = old_len / s.high_freq_factor;
    for (float& f : table.inv_freq) {
      const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_wavelen) {  // medium band: smooth interpolation
        const float smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0f - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return table;
}

ModelConfig ModelConfig::from_gguf(const GgufFile& g) {
  const std::string arch = g.get_string("general.architecture");
  ModelConfig c;
  if (arch == "llama") {
    c.arch = ModelArch::kLlama;
  } else if (arch == "mistral") {
    c.arch = ModelArch::kMistral;
  } else if (arch == "qwen2") {
    c.arch = ModelArch::kQwen2;
    c.qkv_bias = true;
  } else if (arch == "qwen3") {
    c.arch = ModelArch::kQwen3;
    c.qk_norm = true;
  } else {
    throw_error("{}: unsupported architecture '{}' (supported: llama, mistral, qwen2, qwen3)",
                g.path(), arch);
  }
  auto key = [&](const char* k) { return arch + "." + k; };
  c.n_layers = static_cast<int32_t>(g.get_int(key("block_count")));
  c.dim = static_cast<int32_t>(g.get_int(key("embedding_length")));
  c.ffn_dim = static_cast<int32_t>(g.get_int(key("feed_forward_length")));
  c.n_heads = static_cast<int32_t>(g.get_int(key("attention.head_count")));
  c.n_kv_heads = g.has_key(key("attention.head_count_kv"))
                     ? static_cast<int32_t>(g.get_int(key("attention.head_count_kv")))
                     : c.n_heads;
  c.head_dim = g.has_key(key("attention.key_length"))
                   ? static_cast<int32_t>(g.get_int(key("attention.key_length")))
                   : (c.n_heads > 0 ? c.dim / c.n_heads : 0);
  c.max_position = static_cast<int32_t>(g.get_int(key("context_length")));
  c.rms_eps = static_cast<float>(g.get_float(key("attention.layer_norm_rms_epsilon")));
  if (g.has_key(key("rope.freq_base"))) {
    c.rope_theta = static_cast<float>(g.get_float(key("rope.freq_base")));
  }
  if (g.has_key(key("rope.scaling.type"))) {
    const std::string type = g.get_string(key("rope.scaling.type"));
    if (type == "linear") {
      c.rope_scaling.type = RopeScaling::Type::kLinear;
      c.rope_scaling.factor = static_cast<float>(g.get_float(key("rope.scaling.factor")));
    } else if (type != "none") {
      throw_error("{}: unsupported rope scaling type '{}'", g.path(), type);
    }
  }
  if (g.has_key(key("vocab_size"))) {
    c.vocab_size = static_cast<int32_t>(g.get_int(key("vocab_size")));
  } else if (g.has_tensor("token_embd.weight")) {
    c.vocab_size = static_cast<int32_t>(g.tensor_shape("token_embd.weight").at(0));
  }
  c.tied_embeddings = !g.has_tensor("output.weight");
  c.validate(g.path());
  return c;
}

namespace {

template <typename T>
T json_get(const nlohmann::json& j, const char* field, const std::string& path) {
  auto it = j.find(field);
  check(it != j.end() && !it->is_null(), "{}: config.json lacks the field '{}'", path, field);
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw_error("{}: config.json field '{}' has the wrong type", path, field);
  }
}

template <typename T>
T json_get_or(const nlohmann::json& j, const char* field, T fallback, const std::string& path) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  return json_get<T>(j, field, path);
}

}  // namespace

ModelConfig ModelConfig::from_hf_config(const nlohmann::json& j, const std::string& path) {
  check(j.is_object(), "{}: config.json is not a JSON object", path);
  const std::string type = json_get<std::string>(j, "model_type", path);
  ModelConfig c;
  if (type == "llama") {
    c.arch = ModelArch::kLlama;
    c.qkv_bias = json_get_or<bool>(j, "attention_bias", false, path);
  } else if (type == "mistral") {
    c.arch = ModelArch::kMistral;
  } else if (type == "qwen2") {
    c.arch = ModelArch::kQwen2;
    c.qkv_bias = true;
  } else if (type == "qwen3") {
    c.arch = ModelArch::kQwen3;
    c.qk_norm = true;
    c.qkv_bias = json_get_or<bool>(j, "attention_bias", false, path);
  } else {
    throw_error("{}: unsupported model_type '{}' (supported: llama, mistral, qwen2, qwen3)", path,
                type);
  }
  c.vocab_size = json_get<int32_t>(j, "vocab_size", path);
  c.dim = json_get<int32_t>(j, "hidden_size", path);
  c.n_layers = json_get<int32_t>(j, "num_hidden_layers", path);
  c.n_heads = json_get<int32_t>(j, "num_attention_heads", path);
  c.n_kv_heads = json_get_or<int32_t>(j, "num_key_value_heads", c.n_heads, path);
  c.head_dim = json_get_or<int32_t>(j, "head_dim", c.n_heads > 0 ? c.dim / c.n_heads : 0, path);
  c.ffn_dim = json_get<int32_t>(j, "intermediate_size", path);
  c.max_position = json_get_or<int32_t>(j, "max_position_embeddings", 4096, path);
  c.rms_eps = json_get_or<float>(j, "rms_norm_eps", 1e-6f, path);
  c.rope_theta = json_get_or<float>(j, "rope_theta", 10000.0f, path);
  c.tied_embeddings = json_get_or<bool>(j, "tie_word_embeddings", false, path);
  // Mistral's sliding window: attention here is full, which equals sliding-window attention for
  // sequences no longer than the window, so the usable context is capped to the window.
  const int32_t window = json_get_or<int32_t>(j, "sliding_window", 0, path);
  if (window > 0 && window < c.max_position) c.max_position = window;
  auto rs = j.find("rope_scaling");
  if (rs != j.end() && !rs->is_null()) {
    check(rs->is_object(), "{}: rope_scaling must be an object", path);
    std::string rope_type = json_get_or<std::string>(*rs, "rope_type", "", path);
    if (rope_type.empty()) rope_type = json_get_or<std::string>(*rs, "type", "", path);
    if (rope_type == "llama3") {
      c.rope_scaling.type = RopeScaling::Type::kLlama3;
      c.rope_scaling.factor = json_get<float>(*rs, "factor", path);
      c.rope_scaling.low_freq_factor = json_get<float>(*rs, "low_freq_factor", path);
      c.rope_scaling.high_freq_factor = json_get<float>(*rs, "high_freq_factor", path);
      c.rope_scaling.original_max_position =
          json_get<int32_t>(*rs, "original_max_position_embeddings", path);
    } else if (rope_type == "linear") {
      c.rope_scaling.type = RopeScaling::Type::kLinear;
      c.rope_scaling.factor = json_get<float>(*rs, "factor", path);
    } else if (rope_type != "default") {
      throw_error("{}: unsupported rope_scaling type '{}' (supported: llama3, linear)", path,
                  rope_type);
    }
  }
  c.validate(path);
  return c;
}

}  // namespace detllm
