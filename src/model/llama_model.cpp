// Llama-family forward pass on kernels::Ops (see llama_model.h).
#include "model/llama_model.h"

#include <cmath>

#include "core/error.h"

namespace detllm {

struct LlamaModel::Workspace {
  int32_t capacity = 0;  // tokens
  int32_t capacity_rows = 0;
  int32_t capacity_seq_entries = 0;
  kernels::Buffer x, xb, q, k, v, att, proj, gate, up;          // activations (n, ·)
  kernels::Buffer tokens, positions, seq_of_token, slots, rows;  // (n) int32 metadata
  kernels::Buffer block_tables;                                  // (n_seqs * max_blocks)
  kernels::Buffer out_rows, logits;                              // (n_rows, dim / vocab)
};

LlamaModel::LlamaModel(const ModelConfig& config, const ModelWeights& w, kernels::Ops& ops)
    : config_(config), ops_(ops), rope_(config.rope_table()), ws_(std::make_unique<Workspace>()) {
  if (!w.rope_freq_factors.empty()) {
    check(w.rope_freq_factors.size() == rope_.inv_freq.size(),
          "rope_freqs has {} factors, expected {}", w.rope_freq_factors.size(),
          rope_.inv_freq.size());
    for (size_t i = 0; i < rope_.inv_freq.size(); ++i) rope_.inv_freq[i] /= w.rope_freq_factors[i];
  }
  tok_embd_ = place(w.tok_embd);
  for (const LayerWeights& l : w.layers) {
    LayerView v{};
    v.attn_norm = place(l.attn_norm);
    v.wq = place(l.wq);
    v.wk = place(l.wk);
    v.wv = place(l.wv);
    v.wo = place(l.wo);
    v.q_norm = l.q_norm.empty() ? nullptr : place(l.q_norm);
    v.k_norm = l.k_norm.empty() ? nullptr : place(l.k_norm);
    v.ffn_norm = place(l.ffn_norm);
    v.w_gate = place(l.w_gate);
    v.w_up = place(l.w_up);
    v.w_down = place(l.w_down);
    layers_.push_back(v);
  }
  out_norm_ = place(w.out_norm);
  lm_head_ = w.lm_head.w.data.empty() ? tok_embd_ : place(w.lm_head.w);
}

LlamaModel::~LlamaModel() = default;

const float* LlamaModel::place(const std::vector<float>& v) {
  if (ops_.host_memory()) return v.data();
  owned_.emplace_back(ops_, v.size() * sizeof(float));
  ops_.upload(owned_.back().data(), v.data(), v.size() * sizeof(float));
  return owned_.back().f32();
}

kernels::WeightMatrix LlamaModel::place(const HostTensor& t) {
  const int64_t rows = t.shape.at(0), cols = t.shape.at(1);
  const DType dt = ops_.weight_dtype();
  if (ops_.host_memory() && dt == DType::kF32) return {t.data.data(), DType::kF32, rows, cols};
  const size_t n = t.data.size();
  owned_.emplace_back(ops_, n * dtype_size(dt));
  if (dt == DType::kF32) {
    ops_.upload(owned_.back().data(), t.data.data(), n * sizeof(float));
  } else if (dt == DType::kBF16) {
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(t.data[i]);
    ops_.upload(owned_.back().data(), h.data(), n * sizeof(uint16_t));
  } else {
    throw_error("backend {} asks for unsupported weight dtype {}", ops_.name(),
                dtype_name(dt));
  }
  return {owned_.back().data(), dt, rows, cols};
}

LlamaModel::LinearView LlamaModel::place(const Linear& l) {
  return {place(l.w), l.bias.empty() ? nullptr : place(l.bias)};
}

void LlamaModel::forward(std::span<const int32_t> tokens, const kernels::StepBatch& host_batch,
                         std::span<const int32_t> logit_rows, KvStorage& kv,
                         std::vector<float>& logits) const {
  const ModelConfig& c = config_;
  const int32_t n = static_cast<int32_t>(tokens.size());
  check(n == host_batch.n_tokens, "forward: {} tokens but the batch describes {}", n,
        host_batch.n_tokens);
  for (int32_t t : tokens) {
    check(t >= 0 && t < c.vocab_size, "token id {} is outside the vocabulary (0…{})", t,
          c.vocab_size - 1);
  }
  for (int32_t i = 0; i < n; ++i) {
    check(host_batch.positions[i] >= 0 && host_batch.positions[i] < c.max_position,
          "position {} is beyond the model's context of {} tokens", host_batch.positions[i],
          c.max_position);
  }
  const int32_t n_out = static_cast<int32_t>(logit_rows.size());
  for (int32_t t : logit_rows) {
    check(t >= 0 && t < n, "logit row {} is outside the step's {} tokens", t, n);
  }

  // Grow the workspace (backend memory) to this step's size.
  Workspace& ws = *ws_;
  const size_t f = sizeof(float);
  if (n > ws.capacity) {
    const size_t un = static_cast<size_t>(std::max(n, 2 * ws.capacity));
    ws.x = {ops_, un * c.dim * f};
    ws.xb = {ops_, un * c.dim * f};
    ws.q = {ops_, un * c.q_dim() * f};
    ws.k = {ops_, un * c.kv_dim() * f};
    ws.v = {ops_, un * c.kv_dim() * f};
    ws.att = {ops_, un * c.q_dim() * f};
    ws.proj = {ops_, un * c.dim * f};
    ws.gate = {ops_, un * c.ffn_dim * f};
    ws.up = {ops_, un * c.ffn_dim * f};
    ws.tokens = {ops_, un * 4};
    ws.positions = {ops_, un * 4};
    ws.seq_of_token = {ops_, un * 4};
    ws.slots = {ops_, un * 4};
    ws.rows = {ops_, un * 4};
    ws.capacity = static_cast<int32_t>(un);
  }
  if (n_out > ws.capacity_rows) {
    const size_t ur = static_cast<size_t>(std::max(n_out, 2 * ws.capacity_rows));
    ws.out_rows = {ops_, ur * c.dim * f};
    ws.logits = {ops_, ur * c.vocab_size * f};
    ws.capacity_rows = static_cast<int32_t>(ur);
  }
  const int32_t n_table = host_batch.n_seqs * host_batch.max_blocks;
  if (n_table > ws.capacity_seq_entries) {
    ws.block_tables = {ops_, static_cast<size_t>(std::max(n_table, 2 * ws.capacity_seq_entries)) * 4};
    ws.capacity_seq_entries = std::max(n_table, 2 * ws.capacity_seq_entries);
  }
  // Step metadata into backend memory.
  ops_.upload(ws.tokens.data(), tokens.data(), n * 4u);
  ops_.upload(ws.positions.data(), host_batch.positions, n * 4u);
  ops_.upload(ws.seq_of_token.data(), host_batch.seq_of_token, n * 4u);
  ops_.upload(ws.slots.data(), host_batch.slots, n * 4u);
  ops_.upload(ws.rows.data(), logit_rows.data(), n_out * 4u);
  ops_.upload(ws.block_tables.data(), host_batch.block_tables, n_table * 4u);
  kernels::StepBatch batch = host_batch;
  batch.positions = ws.positions.i32();
  batch.seq_of_token = ws.seq_of_token.i32();
  batch.slots = ws.slots.i32();
  batch.block_tables = ws.block_tables.i32();

  float* x = ws.x.f32();
  float* xb = ws.xb.f32();
  float* q = ws.q.f32();
  float* k = ws.k.f32();
  float* v = ws.v.f32();
  float* att = ws.att.f32();
  float* proj = ws.proj.f32();
  float* gate = ws.gate.f32();
  float* up = ws.up.f32();
  const int64_t n_x = int64_t{n} * c.dim;
  const int64_t n_ffn = int64_t{n} * c.ffn_dim;

  ops_.embedding(tok_embd_, ws.tokens.i32(), n, x);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  for (int32_t li = 0; li < c.n_layers; ++li) {
    const LayerView& l = layers_[li];
    const kernels::KvCacheLayer cache = kv.layer(li);
    ops_.rmsnorm(x, l.attn_norm, n, c.dim, c.rms_eps, xb);
    ops_.matmul(xb, n, l.wq.w, l.wq.bias, q);
    ops_.matmul(xb, n, l.wk.w, l.wk.bias, k);
    ops_.matmul(xb, n, l.wv.w, l.wv.bias, v);
    if (c.qk_norm) {
      ops_.rmsnorm(q, l.q_norm, n * c.n_heads, c.head_dim, c.rms_eps, q);
      ops_.rmsnorm(k, l.k_norm, n * c.n_kv_heads, c.head_dim, c.rms_eps, k);
    }
    ops_.rope(q, n, c.n_heads, c.head_dim, batch.positions, rope_);
    ops_.rope(k, n, c.n_kv_heads, c.head_dim, batch.positions, rope_);
    ops_.kv_append(k, v, batch, cache);
    ops_.attention(q, cache, batch, c.n_heads, scale, att);
    ops_.matmul(att, n, l.wo.w, nullptr, proj);
    ops_.add(x, proj, n_x);

    ops_.rmsnorm(x, l.ffn_norm, n, c.dim, c.rms_eps, xb);
    ops_.matmul(xb, n, l.w_gate.w, nullptr, gate);
    ops_.matmul(xb, n, l.w_up.w, nullptr, up);
    ops_.silu_mul(gate, up, n_ffn, gate);
    ops_.matmul(gate, n, l.w_down.w, nullptr, proj);
    ops_.add(x, proj, n_x);
  }

  // Final norm and lm_head only for the rows whose logits are wanted.
  float* rows = ws.out_rows.f32();
  ops_.gather_rows(x, c.dim, ws.rows.i32(), n_out, rows);
  ops_.rmsnorm(rows, out_norm_, n_out, c.dim, c.rms_eps, rows);
  ops_.matmul(rows, n_out, lm_head_, nullptr, ws.logits.f32());
  logits.resize(static_cast<size_t>(n_out) * c.vocab_size);
  ops_.download(logits.data(), ws.logits.data(), logits.size() * sizeof(float));
}

}  // namespace detllm
