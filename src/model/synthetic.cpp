// Synthetic model configurations, the recipe of their seeded weights, and its host values.
#include "model/synthetic.h"

#include <cmath>

#include "core/error.h"
#include "core/quant.h"
#include "kernels/synthetic_values.h"

namespace detllm {
namespace {

using kernels::synthetic_mix;

// Hands out tensor keys in draw order: tensor k (from 1) of seed s has key mix(s ^ mix(k)).
class Recipe {
 public:
  explicit Recipe(uint64_t seed) : seed_(seed) {}
  // Values uniform in [center - scale, center + scale].
  SyntheticTensor values(int64_t rows, int64_t cols, float center, float scale) {
    return {rows, cols, synthetic_mix(seed_ ^ synthetic_mix(++n_tensors_)), center, scale};
  }
  SyntheticTensor matrix(int64_t rows, int64_t cols) {
    return values(rows, cols, 0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  }
  SyntheticLinear linear(int64_t rows, int64_t cols, bool bias) {
    SyntheticLinear l;
    l.w = matrix(rows, cols);
    if (bias) l.bias = values(rows, 1, 0.0f, 0.1f);
    return l;
  }
  SyntheticTensor norm(int64_t n) { return values(n, 1, 1.0f, 0.2f); }

 private:
  uint64_t seed_;
  uint64_t n_tensors_ = 0;
};

HostTensor host_matrix(const SyntheticTensor& t) {
  HostTensor h;
  h.shape = {t.rows, t.cols};
  h.data = synthetic_values(t);
  return h;
}

Linear host_linear(const SyntheticLinear& l) {
  Linear h;
  h.w = host_matrix(l.w);
  h.bias = synthetic_values(l.bias);
  return h;
}

}  // namespace

std::vector<std::string_view> synthetic_config_names() {
  return {"tiny-llama",   "tiny-qwen2",  "tiny-qwen3",   "tiny-qwen3-moe", "mini-olmoe",
          "llama-3.1-8b", "olmoe-1b-7b", "qwen3-30b-a3b"};
}

ModelConfig synthetic_config(std::string_view name) {
  ModelConfig c;
  if (name == "tiny-llama" || name == "tiny-qwen2" || name == "tiny-qwen3" ||
      name == "tiny-qwen3-moe") {
    c.vocab_size = 512;
    c.dim = 64;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.ffn_dim = 160;
    c.max_position = 2048;
    c.rms_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.tied_embeddings = true;
    if (name == "tiny-qwen2") {
      c.arch = ModelArch::kQwen2;
      c.qkv_bias = true;
      c.tied_embeddings = false;
    } else if (name == "tiny-qwen3" || name == "tiny-qwen3-moe") {
      c.arch = ModelArch::kQwen3;
      c.qk_norm = true;
      c.head_dim = 32;  // != dim / n_heads, as in Qwen3
    }
    if (name == "tiny-qwen3-moe") {
      c.arch = ModelArch::kQwen3Moe;
      c.tied_embeddings = false;
      c.moe = {.n_experts = 16, .n_experts_used = 4, .expert_ffn_dim = 32, .renormalize = true};
    }
  } else if (name == "mini-olmoe") {
    // OLMoE-1B-7B's mixture (64 experts, top-8, not renormalised, experts half the hidden
    // size, q/k norms over the whole projections) at a size a CPU decodes in seconds.
    c.arch = ModelArch::kOlmoe;
    c.vocab_size = 8192;
    c.dim = 512;
    c.n_layers = 4;
    c.n_heads = 8;
    c.n_kv_heads = 8;
    c.head_dim = 64;
    c.ffn_dim = 256;
    c.max_position = 4096;
    c.rms_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.qk_norm = true;
    c.qk_norm_full = true;
    c.moe = {.n_experts = 64, .n_experts_used = 8, .expert_ffn_dim = 256, .renormalize = false};
  } else if (name == "llama-3.1-8b") {
    c.vocab_size = 128256;
    c.dim = 4096;
    c.n_layers = 32;
    c.n_heads = 32;
    c.n_kv_heads = 8;
    c.head_dim = 128;
    c.ffn_dim = 14336;
    c.max_position = 131072;
    c.rms_eps = 1e-5f;
    c.rope_theta = 500000.0f;
    c.rope_scaling = {RopeScaling::Type::kLlama3, 8.0f, 1.0f, 4.0f, 8192};
  } else if (name == "olmoe-1b-7b" || name == "qwen3-30b-a3b") {
    // The MoE benchmark shapes (GPU): the experts and attention of the real models; OLMoE's
    // whole-projection q/k norm is replaced by Qwen3's per-head one (the same work to within
    // a norm over 2048 values a token).
    const bool olmoe = name == "olmoe-1b-7b";
    c.arch = ModelArch::kQwen3Moe;
    c.vocab_size = olmoe ? 50304 : 151936;
    c.dim = 2048;
    c.n_layers = olmoe ? 16 : 48;
    c.n_heads = olmoe ? 16 : 32;
    c.n_kv_heads = olmoe ? 16 : 4;
    c.head_dim = 128;
    c.ffn_dim = olmoe ? 1024 : 768;
    c.qk_norm = true;
    c.max_position = olmoe ? 4096 : 40960;
    c.rms_eps = olmoe ? 1e-5f : 1e-6f;
    c.rope_theta = olmoe ? 10000.0f : 1000000.0f;
    c.tied_embeddings = false;
    c.moe = {.n_experts = olmoe ? 64 : 128,
             .n_experts_used = 8,
             .expert_ffn_dim = olmoe ? 1024 : 768,
             .renormalize = !olmoe};
  } else {
    throw_error(
        "unknown synthetic model '{}' (known: tiny-llama, tiny-qwen2, tiny-qwen3, "
        "tiny-qwen3-moe, mini-olmoe, llama-3.1-8b, olmoe-1b-7b, qwen3-30b-a3b)",
        name);
  }
  c.validate(std::string(name));
  return c;
}

size_t SyntheticWeights::bytes(size_t matrix_bytes) const {
  auto m = [&](const SyntheticTensor& t) { return static_cast<size_t>(t.numel()) * matrix_bytes; };
  auto v = [](const SyntheticTensor& t) { return static_cast<size_t>(t.numel()) * 4; };
  auto lin = [&](const SyntheticLinear& l) { return m(l.w) + v(l.bias); };
  size_t n = m(tok_embd) + v(out_norm) + m(lm_head);
  for (const SyntheticLayer& l : layers) {
    n += v(l.attn_norm) + lin(l.wq) + lin(l.wk) + lin(l.wv) + lin(l.wo) + v(l.q_norm) +
         v(l.k_norm) + v(l.ffn_norm) + lin(l.w_gate) + lin(l.w_up) + lin(l.w_down) + m(l.router);
    for (const SyntheticExpert& e : l.experts) n += lin(e.w_gate) + lin(e.w_up) + lin(e.w_down);
  }
  return n;
}

SyntheticWeights synthetic_recipe(const ModelConfig& c, uint64_t seed) {
  Recipe g(seed);
  SyntheticWeights w;
  // Small embeddings: with tied embeddings a large one would make every token predict itself
  // (one dominant logit), and sampling tests would degenerate to greedy.
  w.tok_embd = g.values(c.vocab_size, c.dim, 0.0f, 0.3f);
  w.layers.resize(c.n_layers);
  for (auto& l : w.layers) {
    l.attn_norm = g.norm(c.dim);
    l.wq = g.linear(c.q_dim(), c.dim, c.qkv_bias);
    l.wk = g.linear(c.kv_dim(), c.dim, c.qkv_bias);
    l.wv = g.linear(c.kv_dim(), c.dim, c.qkv_bias);
    l.wo = g.linear(c.dim, c.q_dim(), false);
    if (c.qk_norm) {
      l.q_norm = g.norm(c.q_norm_dim());
      l.k_norm = g.norm(c.k_norm_dim());
    }
    l.ffn_norm = g.norm(c.dim);
    if (c.moe.active()) {
      const int64_t f = c.moe.expert_ffn_dim;
      l.router = g.matrix(synthetic_router_rows(c), c.dim);
      l.experts.resize(static_cast<size_t>(c.moe.n_experts));
      for (SyntheticExpert& e : l.experts) {
        e.w_gate = g.linear(f, c.dim, false);
        e.w_up = g.linear(f, c.dim, false);
        e.w_down = g.linear(c.dim, f, false);
      }
      continue;
    }
    l.w_gate = g.linear(c.ffn_dim, c.dim, false);
    l.w_up = g.linear(c.ffn_dim, c.dim, false);
    l.w_down = g.linear(c.dim, c.ffn_dim, false);
  }
  w.out_norm = g.norm(c.dim);
  if (!c.tied_embeddings) w.lm_head = g.matrix(c.vocab_size, c.dim);
  return w;
}

int32_t synthetic_router_rows(const ModelConfig& c) {
  return c.moe.n_experts <= 16 ? kSyntheticRouterPeriod : c.moe.n_experts;
}

void quantize_synthetic_weights(ModelWeights& w, DType type) {
  auto q = [type](HostTensor& h) {
    if (h.empty()) return;
    check(h.dtype == DType::kF32, "quantize_synthetic_weights: a tensor is already {}",
          dtype_name(h.dtype));
    h.raw.resize(static_cast<size_t>(dtype_row_bytes(type, h.numel())));
    quantize_row(type, h.data.data(), h.raw.data(), h.numel());
    h.data.clear();
    h.data.shrink_to_fit();
    h.dtype = type;
  };
  q(w.tok_embd);
  q(w.lm_head.w);
  for (LayerWeights& l : w.layers)
    for (Linear* m : l.matrices()) q(m->w);
}

std::vector<float> synthetic_values(const SyntheticTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = kernels::synthetic_value(t.key, i, t.center, t.scale);
  return v;
}

ModelWeights make_synthetic_weights(const ModelConfig& c, uint64_t seed) {
  const SyntheticWeights r = synthetic_recipe(c, seed);
  ModelWeights w;
  w.tok_embd = host_matrix(r.tok_embd);
  w.layers.resize(r.layers.size());
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const SyntheticLayer& s = r.layers[i];
    LayerWeights& l = w.layers[i];
    l.attn_norm = synthetic_values(s.attn_norm);
    l.wq = host_linear(s.wq);
    l.wk = host_linear(s.wk);
    l.wv = host_linear(s.wv);
    l.wo = host_linear(s.wo);
    l.q_norm = synthetic_values(s.q_norm);
    l.k_norm = synthetic_values(s.k_norm);
    l.ffn_norm = synthetic_values(s.ffn_norm);
    l.w_gate = host_linear(s.w_gate);
    l.w_up = host_linear(s.w_up);
    l.w_down = host_linear(s.w_down);
    if (s.experts.empty()) continue;
    // The router's rows repeat with period synthetic_router_rows (exact ties, tiny-qwen3-moe).
    const std::vector<float> base = synthetic_values(s.router);
    const auto period = static_cast<size_t>(s.router.rows);
    l.router.w.shape = {static_cast<int64_t>(s.experts.size()), c.dim};
    for (size_t e = 0; e < s.experts.size(); ++e) {
      const size_t from = (e % period) * c.dim;
      l.router.w.data.insert(l.router.w.data.end(), base.begin() + from,
                             base.begin() + from + c.dim);
    }
    for (const SyntheticExpert& se : s.experts)
      l.experts.push_back({host_linear(se.w_gate), host_linear(se.w_up), host_linear(se.w_down)});
  }
  w.out_norm = synthetic_values(r.out_norm);
  if (!r.lm_head.empty()) w.lm_head.w = host_matrix(r.lm_head);
  return w;
}

}  // namespace detllm
