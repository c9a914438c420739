// Llama-family forward pass on kernels::Ops (see llama_model.h).
#include "model/llama_model.h"

#include <cmath>

#include "core/error.h"

namespace detllm {

LlamaModel::LlamaModel(const ModelConfig& config, const ModelWeights& weights,
                       kernels::Ops& ops)
    : config_(config), weights_(weights), ops_(ops), rope_(config.rope_table()) {
  if (!weights.rope_freq_factors.empty()) {
    check(weights.rope_freq_factors.size() == rope_.inv_freq.size(),
          "rope_freqs has {} factors, expected {}", weights.rope_freq_factors.size(),
          rope_.inv_freq.size());
    for (size_t i = 0; i < rope_.inv_freq.size(); ++i) {
      rope_.inv_freq[i] /= weights.rope_freq_factors[i];
    }
  }
}

void LlamaModel::forward(std::span<const int32_t> tokens, const kernels::StepBatch& batch,
                         std::span<const int32_t> logit_rows, KvStorage& kv,
                         std::vector<float>& logits) const {
  const ModelConfig& c = config_;
  const int32_t n = static_cast<int32_t>(tokens.size());
  check(n == batch.n_tokens, "forward: {} tokens but the batch describes {}", n, batch.n_tokens);
  for (int32_t t : tokens) {
    check(t >= 0 && t < c.vocab_size, "token id {} is outside the vocabulary (0…{})", t,
          c.vocab_size - 1);
  }
  for (int32_t i = 0; i < n; ++i) {
    check(batch.positions[i] >= 0 && batch.positions[i] < c.max_position,
          "position {} is beyond the model's context of {} tokens", batch.positions[i],
          c.max_position);
  }
  const size_t un = static_cast<size_t>(n);
  std::vector<float> x(un * c.dim);         // (n, dim) residual stream
  std::vector<float> xb(un * c.dim);        // (n, dim) normed input of a sub-block
  std::vector<float> q(un * c.q_dim());     // (n, n_heads, head_dim)
  std::vector<float> k(un * c.kv_dim());    // (n, n_kv_heads, head_dim)
  std::vector<float> v(un * c.kv_dim());    // (n, n_kv_heads, head_dim)
  std::vector<float> att(un * c.q_dim());   // (n, n_heads, head_dim)
  std::vector<float> proj(un * c.dim);      // (n, dim) output of o_proj / down_proj
  std::vector<float> gate(un * c.ffn_dim);  // (n, ffn_dim)
  std::vector<float> up(un * c.ffn_dim);    // (n, ffn_dim)

  const kernels::WeightMatrix embd{weights_.tok_embd.data.data(), DType::kF32, c.vocab_size,
                                   c.dim};
  ops_.embedding(embd, tokens.data(), n, x.data());
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  for (int32_t li = 0; li < c.n_layers; ++li) {
    const LayerWeights& l = weights_.layers[li];
    const kernels::KvCacheLayer cache = kv.layer(li);
    ops_.rmsnorm(x.data(), l.attn_norm.data(), n, c.dim, c.rms_eps, xb.data());
    ops_.matmul(xb.data(), n, l.wq.view(), l.wq.bias_ptr(), q.data());
    ops_.matmul(xb.data(), n, l.wk.view(), l.wk.bias_ptr(), k.data());
    ops_.matmul(xb.data(), n, l.wv.view(), l.wv.bias_ptr(), v.data());
    if (c.qk_norm) {
      ops_.rmsnorm(q.data(), l.q_norm.data(), n * c.n_heads, c.head_dim, c.rms_eps, q.data());
      ops_.rmsnorm(k.data(), l.k_norm.data(), n * c.n_kv_heads, c.head_dim, c.rms_eps,
                   k.data());
    }
    ops_.rope(q.data(), n, c.n_heads, c.head_dim, batch.positions, rope_);
    ops_.rope(k.data(), n, c.n_kv_heads, c.head_dim, batch.positions, rope_);
    ops_.kv_append(k.data(), v.data(), batch, cache);
    ops_.attention(q.data(), cache, batch, c.n_heads, scale, att.data());
    ops_.matmul(att.data(), n, l.wo.view(), nullptr, proj.data());
    ops_.add(x.data(), proj.data(), static_cast<int64_t>(x.size()));

    ops_.rmsnorm(x.data(), l.ffn_norm.data(), n, c.dim, c.rms_eps, xb.data());
    ops_.matmul(xb.data(), n, l.w_gate.view(), nullptr, gate.data());
    ops_.matmul(xb.data(), n, l.w_up.view(), nullptr, up.data());
    ops_.silu_mul(gate.data(), up.data(), static_cast<int64_t>(gate.size()), gate.data());
    ops_.matmul(gate.data(), n, l.w_down.view(), nullptr, proj.data());
    ops_.add(x.data(), proj.data(), static_cast<int64_t>(x.size()));
  }

  // Final norm and lm_head only for the rows whose logits are wanted.
  const int32_t n_out = static_cast<int32_t>(logit_rows.size());
  std::vector<float> rows(static_cast<size_t>(n_out) * c.dim);
  for (int32_t r = 0; r < n_out; ++r) {
    const int32_t t = logit_rows[r];
    check(t >= 0 && t < n, "logit row {} is outside the step's {} tokens", t, n);
    std::copy_n(x.data() + static_cast<size_t>(t) * c.dim, c.dim,
                rows.data() + static_cast<size_t>(r) * c.dim);
  }
  ops_.rmsnorm(rows.data(), weights_.out_norm.data(), n_out, c.dim, c.rms_eps, rows.data());
  const HostTensor& head = weights_.lm_head_tensor();
  logits.resize(static_cast<size_t>(n_out) * c.vocab_size);
  ops_.matmul(rows.data(), n_out, {head.data.data(), DType::kF32, c.vocab_size, c.dim}, nullptr,
              logits.data());
}

}  // namespace detllm
