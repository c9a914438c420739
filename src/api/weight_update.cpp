// Hugging Face names of the Llama-family parameters and the checked, all-or-nothing write of
// caller tensors into the host fp32 weights (weight_update.h).
#include "api/weight_update.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <map>

#include "core/dtype.h"
#include "core/error.h"

namespace detllm::api {
namespace {

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

}  // namespace

std::vector<ParameterSlot> parameter_slots(const ModelConfig& c, ModelWeights& w) {
  std::vector<ParameterSlot> out;
  auto tensor = [&](std::string name, HostTensor& t) {
    // Writable fp32 slots: the session widened every stored block type at load.
    check(t.dtype == DType::kF32, "parameter_slots: {} is held as {}, not fp32 (call "
          "dequantize_weights first)", name, dtype_name(t.dtype));
    out.push_back({std::move(name), t.shape, t.data.data()});
  };
  auto vec = [&](std::string name, std::vector<float>& v) {
    if (!v.empty()) out.push_back({std::move(name), {static_cast<int64_t>(v.size())}, v.data()});
  };
  auto linear = [&](const std::string& prefix, Linear& l) {
    tensor(prefix + ".weight", l.w);
    vec(prefix + ".bias", l.bias);
  };
  tensor("model.embed_tokens.weight", w.tok_embd);
  for (int32_t i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = w.layers.at(static_cast<size_t>(i));
    const std::string p = fmt::format("model.layers.{}.", i);
    vec(p + "input_layernorm.weight", l.attn_norm);
    linear(p + "self_attn.q_proj", l.wq);
    linear(p + "self_attn.k_proj", l.wk);
    linear(p + "self_attn.v_proj", l.wv);
    linear(p + "self_attn.o_proj", l.wo);
    vec(p + "self_attn.q_norm.weight", l.q_norm);
    vec(p + "self_attn.k_norm.weight", l.k_norm);
    vec(p + "post_attention_layernorm.weight", l.ffn_norm);
    linear(p + "mlp.gate_proj", l.w_gate);
    linear(p + "mlp.up_proj", l.w_up);
    linear(p + "mlp.down_proj", l.w_down);
  }
  vec("model.norm.weight", w.out_norm);
  if (w.lm_head.w.empty()) {
    tensor("lm_head.weight", w.tok_embd);  // tied: the same values as embed_tokens
  } else {
    tensor("lm_head.weight", w.lm_head.w);
  }
  return out;
}

void write_weights(std::span<const ParameterSlot> slots, std::span<const WeightSource> sources) {
  std::map<std::string, const ParameterSlot*> by_name;
  for (const auto& s : slots) by_name[s.name] = &s;
  std::vector<std::string> problems;
  std::map<std::string, int> seen;
  std::map<const float*, std::string> target_of;  // tied names: one target
  std::map<std::string, const WeightSource*> first_source;
  for (const auto& src : sources) {
    const auto it = by_name.find(src.name);
    if (it == by_name.end()) {
      problems.push_back(fmt::format(
          "{}: not a parameter of this model (names are Hugging Face's, e.g. "
          "model.layers.0.self_attn.q_proj.weight; LLM.parameter_names() lists them)",
          src.name));
      continue;
    }
    const ParameterSlot& slot = *it->second;
    if (++seen[src.name] == 2) problems.push_back(fmt::format("{}: given more than once", src.name));
    if (src.shape != slot.shape) {
      problems.push_back(fmt::format("{}: shape {} but the model's is {}", src.name,
                                     shape_str(src.shape), shape_str(slot.shape)));
    }
    if (src.dtype != "float32" && src.dtype != "bfloat16" && src.dtype != "float16") {
      problems.push_back(fmt::format(
          "{}: dtype {} is not accepted (float32, bfloat16 or float16: these widen to the "
          "engine's fp32 exactly; convert with .float() if you mean a rounded copy)",
          src.name, src.dtype));
    }
    if (src.data == nullptr && slot.numel() > 0) {
      problems.push_back(fmt::format("{}: no data", src.name));
    }
    // Tied embeddings: lm_head.weight and model.embed_tokens.weight are one tensor (a
    // state_dict holds both); both may come, with equal values.
    if (auto [t, fresh] = target_of.emplace(slot.data, src.name); !fresh && t->second != src.name) {
      const WeightSource& first = *first_source.at(t->second);
      const size_t bytes = static_cast<size_t>(slot.numel()) * (src.dtype == "float32" ? 4 : 2);
      if (first.dtype != src.dtype || first.shape != src.shape ||
          (src.shape == slot.shape && src.data != first.data && std::memcmp(src.data, first.data, bytes) != 0)) {
        problems.push_back(fmt::format(
            "{}: the same tensor as {} (tied embeddings) but with other values; give one of "
            "the two",
            src.name, t->second));
      }
    }
    first_source.emplace(src.name, &src);
  }
  if (!problems.empty()) {
    throw_error("update_weights: {} problem{} (nothing was written):\n  {}", problems.size(),
                problems.size() == 1 ? "" : "s", fmt::join(problems, "\n  "));
  }
  for (const auto& src : sources) {
    const ParameterSlot& slot = *by_name.at(src.name);
    const size_t n = static_cast<size_t>(slot.numel());
    if (src.dtype == "float32") {
      std::memcpy(slot.data, src.data, n * sizeof(float));
    } else {
      const auto* h = static_cast<const uint16_t*>(src.data);
      const bool bf16 = src.dtype == "bfloat16";
      for (size_t i = 0; i < n; ++i) slot.data[i] = bf16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
    }
  }
}

}  // namespace detllm::api
