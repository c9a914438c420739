// ModelConfig validation and RoPE frequencies (parsing: config_gguf.cpp, config_hf.cpp).
#include "model/config.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace detllm {

std::string_view model_arch_name(ModelArch arch) {
  switch (arch) {
    case ModelArch::kLlama: return "llama";
    case ModelArch::kMistral: return "mistral";
    case ModelArch::kQwen2: return "qwen2";
    case ModelArch::kQwen3: return "qwen3";
    case ModelArch::kQwen3Moe: return "qwen3_moe";
    case ModelArch::kMixtral: return "mixtral";
    case ModelArch::kQwen2Moe: return "qwen2_moe";
    case ModelArch::kOlmoe: return "olmoe";
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
  if (moe.active()) {
    check(moe.n_experts <= 1024 && moe.n_experts_used >= 1 && moe.n_experts_used <= moe.n_experts,
          "{}: a mixture of {} experts using {} per token is not supported (1 <= used <= "
          "experts <= 1024)",
          source, moe.n_experts, moe.n_experts_used);
    check(moe.expert_ffn_dim > 0 && moe.expert_ffn_dim <= (1 << 18) &&
              moe.shared_expert_ffn_dim >= 0 && moe.shared_expert_ffn_dim <= (1 << 18),
          "{}: expert sizes {} / {} (shared) out of the supported range", source,
          moe.expert_ffn_dim, moe.shared_expert_ffn_dim);
  }
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

}  // namespace detllm
