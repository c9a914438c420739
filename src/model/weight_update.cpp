// Hugging Face names of the Llama-family parameters (the mixture-of-experts ones included) and the checked, all-or-nothing write of
// caller tensors into the host fp32 weights (weight_update.h).
#include "model/weight_update.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <map>
#include <tuple>

#include "core/dtype.h"
#include "core/error.h"

namespace detllm {
namespace {

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

}  // namespace

std::vector<ParameterSlot> parameter_slots(const ModelConfig& c, ModelWeights* w) {
  using P = LlamaModel::Param;
  std::vector<ParameterSlot> out;
  // A matrix or vector of the config's shape; its host fp32 values when w is given (the
  // session widened every stored block type at load).
  auto tensor = [&](std::string name, HostTensor* t, std::vector<int64_t> shape, P p, int32_t layer) {
    float* data = nullptr;
    if (t != nullptr) {
      check(t->dtype == DType::kF32, "parameter_slots: {} is held as {}, not fp32 (call "
            "dequantize_weights first)", name, dtype_name(t->dtype));
      check(t->shape == shape, "parameter_slots: {} is held with shape [{}], the config says [{}]",
            name, fmt::join(t->shape, ", "), fmt::join(shape, ", "));
      data = t->data.data();
    }
    out.push_back({std::move(name), std::move(shape), data, p, layer});
  };
  auto vec = [&](std::string name, std::vector<float>* v, int64_t n, bool present, P p, int32_t layer) {
    if (w != nullptr) present = !v->empty();
    if (!present) return;
    check(w == nullptr || static_cast<int64_t>(v->size()) == n,
          "parameter_slots: {} has {} values, the config says {}", name, v->size(), n);
    out.push_back({std::move(name), {n}, w != nullptr ? v->data() : nullptr, p, layer});
  };
  const int64_t dim = c.dim, q = int64_t{c.n_heads} * c.head_dim, kv = int64_t{c.n_kv_heads} * c.head_dim;
  tensor("model.embed_tokens.weight", w ? &w->tok_embd : nullptr, {c.vocab_size, dim}, P::kTokEmbd, 0);
  for (int32_t i = 0; i < c.n_layers; ++i) {
    LayerWeights* l = w ? &w->layers.at(static_cast<size_t>(i)) : nullptr;
    const std::string p = fmt::format("model.layers.{}.", i);
    auto lin = [&](const std::string& prefix, Linear* x, int64_t rows, int64_t cols, P wp, P bp, bool bias) {
      tensor(prefix + ".weight", x ? &x->w : nullptr, {rows, cols}, wp, i);
      vec(prefix + ".bias", x ? &x->bias : nullptr, rows, bias, bp, i);
    };
    vec(p + "input_layernorm.weight", l ? &l->attn_norm : nullptr, dim, true, P::kAttnNorm, i);
    lin(p + "self_attn.q_proj", l ? &l->wq : nullptr, q, dim, P::kWq, P::kBq, c.qkv_bias);
    lin(p + "self_attn.k_proj", l ? &l->wk : nullptr, kv, dim, P::kWk, P::kBk, c.qkv_bias);
    lin(p + "self_attn.v_proj", l ? &l->wv : nullptr, kv, dim, P::kWv, P::kBv, c.qkv_bias);
    // o_proj, gate/up/down have no bias in the Llama family (LlamaModel ignores none it has).
    tensor(p + "self_attn.o_proj.weight", l ? &l->wo.w : nullptr, {dim, q}, P::kWo, i);
    vec(p + "self_attn.q_norm.weight", l ? &l->q_norm : nullptr, c.q_norm_dim(), c.qk_norm,
        P::kQNorm, i);
    vec(p + "self_attn.k_norm.weight", l ? &l->k_norm : nullptr, c.k_norm_dim(), c.qk_norm,
        P::kKNorm, i);
    vec(p + "post_attention_layernorm.weight", l ? &l->ffn_norm : nullptr, dim, true, P::kFfnNorm, i);
    if (!c.moe.active()) {
      tensor(p + "mlp.gate_proj.weight", l ? &l->w_gate.w : nullptr, {c.ffn_dim, dim}, P::kGate, i);
      tensor(p + "mlp.up_proj.weight", l ? &l->w_up.w : nullptr, {c.ffn_dim, dim}, P::kUp, i);
      tensor(p + "mlp.down_proj.weight", l ? &l->w_down.w : nullptr, {dim, c.ffn_dim}, P::kDown, i);
      continue;
    }
    // Mixture of experts: the router, every expert's gate/up/down, Qwen2-MoE's shared expert
    // and its gate, by the checkpoint's names (Mixtral: block_sparse_moe, w1/w3/w2).
    if (l != nullptr) {
      check(l->experts.size() == static_cast<size_t>(c.moe.n_experts),
            "parameter_slots: layer {} holds {} experts, the config says {}", i,
            l->experts.size(), c.moe.n_experts);
    }
    const bool mixtral = c.arch == ModelArch::kMixtral;
    const std::string block = p + (mixtral ? "block_sparse_moe." : "mlp.");
    const int64_t fe = c.moe.expert_ffn_dim, n_exp = c.moe.n_experts;
    tensor(block + "gate.weight", l ? &l->router.w : nullptr, {n_exp, dim}, P::kRouter, i);
    for (int32_t e = 0; e < c.moe.n_experts; ++e) {
      MlpWeights* m = l ? &l->experts[static_cast<size_t>(e)] : nullptr;
      const std::string ep = fmt::format("{}experts.{}.", block, e);
      const size_t first = out.size();
      tensor(ep + (mixtral ? "w1" : "gate_proj") + ".weight", m ? &m->w_gate.w : nullptr,
             {fe, dim}, P::kExpertGate, i);
      tensor(ep + (mixtral ? "w3" : "up_proj") + ".weight", m ? &m->w_up.w : nullptr, {fe, dim},
             P::kExpertUp, i);
      tensor(ep + (mixtral ? "w2" : "down_proj") + ".weight", m ? &m->w_down.w : nullptr,
             {dim, fe}, P::kExpertDown, i);
      for (size_t k = first; k < out.size(); ++k) out[k].expert = e;
    }
    if (c.moe.shared_expert_ffn_dim > 0) {
      const int64_t fs = c.moe.shared_expert_ffn_dim;
      MlpWeights* s = l ? &l->shared_expert : nullptr;
      tensor(p + "mlp.shared_expert.gate_proj.weight", s ? &s->w_gate.w : nullptr, {fs, dim},
             P::kSharedGate, i);
      tensor(p + "mlp.shared_expert.up_proj.weight", s ? &s->w_up.w : nullptr, {fs, dim},
             P::kSharedUp, i);
      tensor(p + "mlp.shared_expert.down_proj.weight", s ? &s->w_down.w : nullptr, {dim, fs},
             P::kSharedDown, i);
      tensor(p + "mlp.shared_expert_gate.weight", l ? &l->shared_expert_gate.w : nullptr,
             {1, dim}, P::kSharedExpertGate, i);
    }
  }
  vec("model.norm.weight", w ? &w->out_norm : nullptr, dim, true, P::kOutNorm, 0);
  const bool tied = w != nullptr ? w->lm_head.w.empty() : c.tied_embeddings;
  if (tied) {
    // The same values as embed_tokens (HF's state_dict has both names).
    tensor("lm_head.weight", w ? &w->tok_embd : nullptr, {c.vocab_size, dim}, P::kTokEmbd, 0);
  } else {
    tensor("lm_head.weight", w ? &w->lm_head.w : nullptr, {c.vocab_size, dim}, P::kLmHead, 0);
  }
  return out;
}

std::vector<size_t> check_weights(std::span<const ParameterSlot> slots,
                                  std::span<const WeightSource> sources) {
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < slots.size(); ++i) by_name[slots[i].name] = i;
  std::vector<std::string> problems;
  std::vector<size_t> index(sources.size(), 0);
  std::map<std::string, int> seen;
  std::map<std::tuple<int, int32_t, int32_t>, std::string> target_of;  // tied names: one target
  std::map<std::string, const WeightSource*> first_source;
  for (size_t si = 0; si < sources.size(); ++si) {
    const WeightSource& src = sources[si];
    const auto it = by_name.find(src.name);
    if (it == by_name.end()) {
      problems.push_back(fmt::format(
          "{}: not a parameter of this model (names are Hugging Face's, e.g. "
          "model.layers.0.self_attn.q_proj.weight; LLM.parameter_names() lists them)",
          src.name));
      continue;
    }
    index[si] = it->second;
    const ParameterSlot& slot = slots[it->second];
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
    // state_dict holds both); both may come, with equal values (device tensors: the same
    // memory, as a tied torch module's two names are).
    const std::tuple<int, int32_t, int32_t> target{static_cast<int>(slot.param), slot.layer,
                                                   slot.expert};
    if (auto [t, fresh] = target_of.emplace(target, src.name); !fresh && t->second != src.name) {
      const WeightSource& first = *first_source.at(t->second);
      const size_t bytes = static_cast<size_t>(slot.numel()) * (src.dtype == "float32" ? 4 : 2);
      const bool same_memory = src.data == first.data;
      const bool comparable = !src.on_device && !first.on_device;
      if (first.dtype != src.dtype || first.shape != src.shape ||
          (src.shape == slot.shape && !same_memory &&
           (!comparable || std::memcmp(src.data, first.data, bytes) != 0))) {
        problems.push_back(fmt::format(
            "{}: the same tensor as {} (tied embeddings) but with other values{}; give one of "
            "the two",
            src.name, t->second, comparable ? "" : " or other device memory"));
      }
    }
    first_source.emplace(src.name, &src);
  }
  if (!problems.empty()) {
    throw_error("update_weights: {} problem{} (nothing was written):\n  {}", problems.size(),
                problems.size() == 1 ? "" : "s", fmt::join(problems, "\n  "));
  }
  return index;
}

void widen_to_f32(const WeightSource& src, float* dst, size_t n) {
  check(!src.on_device, "widen_to_f32: {} is in device memory", src.name);
  if (src.dtype == "float32") {
    std::memcpy(dst, src.data, n * sizeof(float));
    return;
  }
  check(src.dtype == "bfloat16" || src.dtype == "float16", "widen_to_f32: {}: dtype {}",
        src.name, src.dtype);
  const auto* h = static_cast<const uint16_t*>(src.data);
  const bool bf16 = src.dtype == "bfloat16";
  for (size_t i = 0; i < n; ++i) dst[i] = bf16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
}

void write_weights(std::span<const ParameterSlot> slots, std::span<const WeightSource> sources) {
  const std::vector<size_t> index = check_weights(slots, sources);
  for (size_t i = 0; i < sources.size(); ++i) {
    const ParameterSlot& slot = slots[index[i]];
    check(slot.data != nullptr, "update_weights: {}: this session keeps no host copy of the "
          "weights", slot.name);
    widen_to_f32(sources[i], slot.data, static_cast<size_t>(slot.numel()));
  }
}

}  // namespace detllm
