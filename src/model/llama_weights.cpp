// Maps file tensor names to LayerWeights, validates shapes, un-permutes GGUF q/k rows.
#include "model/llama_weights.h"

#include <fmt/format.h>

#include "core/error.h"

namespace detllm {
namespace {

struct Names {
  WeightNaming naming;
  std::string layer(int i, const char* gguf, const char* hf) const {
    return naming == WeightNaming::kGguf ? fmt::format("blk.{}.{}", i, gguf)
                                         : fmt::format("model.layers.{}.{}", i, hf);
  }
  std::string global(const char* gguf, const char* hf) const {
    return naming == WeightNaming::kGguf ? gguf : hf;
  }
};

class Loader {
 public:
  Loader(const TensorSource& source, size_t total, const std::function<void(size_t, size_t)>& cb)
      : source_(source), total_(total), progress_(cb) {}

  HostTensor tensor(const std::string& name, std::vector<int64_t> shape) {
    check(source_.has_tensor(name), "{}: missing tensor '{}' (is this a complete model?)",
          source_.path(), name);
    HostTensor t = source_.load_f32(name);
    // A 1-D GGUF vector may be stored as (1, n); normalise by element count for vectors.
    const bool same = t.shape == shape ||
                      (shape.size() == 1 && t.numel() == shape[0] && t.shape.size() <= 2);
    check(same, "{}: tensor '{}' has shape {}, expected {}", source_.path(), name,
          fmt::join(t.shape, "x"), fmt::join(shape, "x"));
    t.shape = std::move(shape);
    if (progress_) progress_(++done_, total_);
    return t;
  }
  std::vector<float> vec(const std::string& name, int64_t n) {
    return std::move(tensor(name, {n}).data);
  }
  bool has(const std::string& name) const { return source_.has_tensor(name); }

 private:
  const TensorSource& source_;
  size_t total_;
  size_t done_ = 0;
  const std::function<void(size_t, size_t)>& progress_;
};

// llama.cpp's converter stores q/k rows of each head interleaved (pairs (2i, 2i+1)) for its
// adjacent-pair RoPE; HF's half-split RoPE wants row i and i + head_dim/2. Undo it.
void unpermute_rows(HostTensor& t, int32_t n_heads, int32_t head_dim) {
  const int64_t cols = t.shape.at(1);
  const int32_t half = head_dim / 2;
  std::vector<float> out(t.data.size());
  for (int32_t h = 0; h < n_heads; ++h) {
    for (int32_t i = 0; i < half; ++i) {
      for (int32_t j = 0; j < 2; ++j) {
        const int64_t src = static_cast<int64_t>(h) * head_dim + 2 * i + j;
        const int64_t dst = static_cast<int64_t>(h) * head_dim + j * half + i;
        std::copy_n(t.data.data() + src * cols, cols, out.data() + dst * cols);
      }
    }
  }
  t.data = std::move(out);
}

}  // namespace

ModelWeights load_weights(const TensorSource& source, WeightNaming naming,
                          const ModelConfig& c, const std::function<void(size_t, size_t)>& cb) {
  const Names n{naming};
  const bool gguf = naming == WeightNaming::kGguf;
  const size_t total = source.tensor_names().size();
  Loader ld(source, total, cb);
  auto linear = [&](int i, const char* g, const char* h, int64_t out, int64_t in, bool bias) {
    Linear l;
    l.w = ld.tensor(n.layer(i, fmt::format("{}.weight", g).c_str(),
                            fmt::format("{}.weight", h).c_str()),
                    {out, in});
    if (bias) {
      l.bias = ld.vec(n.layer(i, fmt::format("{}.bias", g).c_str(),
                              fmt::format("{}.bias", h).c_str()),
                      out);
    }
    return l;
  };

  ModelWeights w;
  w.tok_embd = ld.tensor(n.global("token_embd.weight", "model.embed_tokens.weight"),
                         {c.vocab_size, c.dim});
  w.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = w.layers[i];
    l.attn_norm = ld.vec(n.layer(i, "attn_norm.weight", "input_layernorm.weight"), c.dim);
    l.wq = linear(i, "attn_q", "self_attn.q_proj", c.q_dim(), c.dim, c.qkv_bias);
    l.wk = linear(i, "attn_k", "self_attn.k_proj", c.kv_dim(), c.dim, c.qkv_bias);
    l.wv = linear(i, "attn_v", "self_attn.v_proj", c.kv_dim(), c.dim, c.qkv_bias);
    l.wo = linear(i, "attn_output", "self_attn.o_proj", c.dim, c.q_dim(), false);
    if (c.qk_norm) {
      l.q_norm = ld.vec(n.layer(i, "attn_q_norm.weight", "self_attn.q_norm.weight"), c.head_dim);
      l.k_norm = ld.vec(n.layer(i, "attn_k_norm.weight", "self_attn.k_norm.weight"), c.head_dim);
    }
    l.ffn_norm = ld.vec(n.layer(i, "ffn_norm.weight", "post_attention_layernorm.weight"), c.dim);
    l.w_gate = linear(i, "ffn_gate", "mlp.gate_proj", c.ffn_dim, c.dim, false);
    l.w_up = linear(i, "ffn_up", "mlp.up_proj", c.ffn_dim, c.dim, false);
    l.w_down = linear(i, "ffn_down", "mlp.down_proj", c.dim, c.ffn_dim, false);
    if (gguf && (c.arch == ModelArch::kLlama || c.arch == ModelArch::kMistral)) {
      unpermute_rows(l.wq.w, c.n_heads, c.head_dim);
      unpermute_rows(l.wk.w, c.n_kv_heads, c.head_dim);
    }
  }
  w.out_norm = ld.vec(n.global("output_norm.weight", "model.norm.weight"), c.dim);
  const std::string head = n.global("output.weight", "lm_head.weight");
  if (!c.tied_embeddings || ld.has(head)) {
    w.lm_head.w = ld.tensor(head, {c.vocab_size, c.dim});
  }
  if (gguf && ld.has("rope_freqs.weight")) {
    w.rope_freq_factors = ld.vec("rope_freqs.weight", c.head_dim / 2);
  }
  return w;
}

}  // namespace detllm
