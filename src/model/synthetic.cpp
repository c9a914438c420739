// Synthetic model configurations and seeded weights.
#include "model/synthetic.h"

#include <cmath>

#include "core/error.h"

namespace detllm {
namespace {

// splitmix64 of (seed, tensor, index): portable, stateless, good enough for weights.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Gen {
 public:
  explicit Gen(uint64_t seed) : seed_(seed) {}
  // Values uniform in [center - scale, center + scale].
  std::vector<float> values(int64_t n, float center, float scale) {
    const uint64_t tensor = mix(seed_ ^ mix(++n_tensors_));
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t r = mix(tensor + static_cast<uint64_t>(i));
      const float u = static_cast<float>(r >> 40) * 0x1.0p-24f;  // [0, 1)
      v[static_cast<size_t>(i)] = center + scale * (2.0f * u - 1.0f);
    }
    return v;
  }
  HostTensor matrix(int64_t rows, int64_t cols) {
    return {{rows, cols}, values(rows * cols, 0.0f, 1.0f / std::sqrt(static_cast<float>(cols)))};
  }
  Linear linear(int64_t rows, int64_t cols, bool bias) {
    Linear l;
    l.w = matrix(rows, cols);
    if (bias) l.bias = values(rows, 0.0f, 0.1f);
    return l;
  }
  std::vector<float> norm(int64_t n) { return values(n, 1.0f, 0.2f); }

 private:
  uint64_t seed_;
  uint64_t n_tensors_ = 0;
};

}  // namespace

std::vector<std::string_view> synthetic_config_names() {
  return {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "llama-3.1-8b"};
}

ModelConfig synthetic_config(std::string_view name) {
  ModelConfig c;
  if (name == "tiny-llama" || name == "tiny-qwen2" || name == "tiny-qwen3") {
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
    } else if (name == "tiny-qwen3") {
      c.arch = ModelArch::kQwen3;
      c.qk_norm = true;
      c.head_dim = 32;  // != dim / n_heads, as in Qwen3
    }
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
  } else {
    throw_error("unknown synthetic model '{}' (known: tiny-llama, tiny-qwen2, tiny-qwen3, "
                "llama-3.1-8b)", name);
  }
  c.validate(std::string(name));
  return c;
}

ModelWeights make_synthetic_weights(const ModelConfig& c, uint64_t seed) {
  Gen g(seed);
  ModelWeights w;
  // Small embeddings: with tied embeddings a large one would make every token predict itself
  // (one dominant logit), and sampling tests would degenerate to greedy.
  w.tok_embd = {{c.vocab_size, c.dim}, g.values(int64_t{c.vocab_size} * c.dim, 0.0f, 0.3f)};
  w.layers.resize(c.n_layers);
  for (auto& l : w.layers) {
    l.attn_norm = g.norm(c.dim);
    l.wq = g.linear(c.q_dim(), c.dim, c.qkv_bias);
    l.wk = g.linear(c.kv_dim(), c.dim, c.qkv_bias);
    l.wv = g.linear(c.kv_dim(), c.dim, c.qkv_bias);
    l.wo = g.linear(c.dim, c.q_dim(), false);
    if (c.qk_norm) {
      l.q_norm = g.norm(c.head_dim);
      l.k_norm = g.norm(c.head_dim);
    }
    l.ffn_norm = g.norm(c.dim);
    l.w_gate = g.linear(c.ffn_dim, c.dim, false);
    l.w_up = g.linear(c.ffn_dim, c.dim, false);
    l.w_down = g.linear(c.dim, c.ffn_dim, false);
  }
  w.out_norm = g.norm(c.dim);
  if (!c.tied_embeddings) w.lm_head.w = g.matrix(c.vocab_size, c.dim);
  return w;
}

}  // namespace detllm
