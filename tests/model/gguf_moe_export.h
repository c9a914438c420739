// A mixture-of-experts model's weights written as a GGUF file in llama.cpp's layout, for the
// GGUF MoE tests: the tiny transformers checkpoints of tests/data/loaders/hf_v5 and the
// synthetic tiny-qwen3-moe become GGUF files at test time (no GGUF fixture in the repository).
// The layout mirrors llama.cpp's converter: architecture qwen3moe / qwen2moe / olmoe, or llama
// with expert_count for Mixtral (whose q/k rows are permuted for llama.cpp's interleaved
// RoPE); the router blk.N.ffn_gate_inp; the experts stacked in 3-D tensors
// blk.N.ffn_{gate,up,down}_exps (ggml ne = {cols, rows, n_expert}); Qwen2-MoE's shared expert
// blk.N.ffn_{gate,up,down}_shexp and its 1-D gate blk.N.ffn_gate_inp_shexp. The independent
// check of this layout against llama.cpp's own gguf package is scripts/ref/moe_gguf.py with
// tests/e2e/test_moe_gguf.py.
#pragma once

#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/quant.h"
#include "formats/dequant.h"
#include "model/config.h"
#include "model/llama_weights.h"
#include "model/gguf_writer.h"

namespace detllm::testing {

inline const char* gguf_arch_name(ModelArch a) {
  switch (a) {
    case ModelArch::kQwen3Moe: return "qwen3moe";
    case ModelArch::kQwen2Moe: return "qwen2moe";
    case ModelArch::kOlmoe: return "olmoe";
    case ModelArch::kMixtral: return "llama";
    default: throw std::invalid_argument("not a mixture-of-experts architecture");
  }
}

struct MoeGgufOptions {
  // The routed experts' type: kF32 keeps the weights' values; a block type quantizes fp32
  // experts with core/quant.h (experts already held in a block type are written as they are).
  DType expert_type = DType::kF32;
  // Extra metadata under the architecture's namespace, e.g. {"expert_weights_norm", false}.
  std::vector<std::pair<std::string, GgufMetaValue>> extra;
  // Mixtral: permute q/k rows as llama.cpp's converter does (false: a negative control).
  bool permute_qk = true;
  // Drops or edits tensors before writing (malformed-file tests).
  std::function<void(std::vector<GgufOutTensor>&)> edit;
};

// The bytes of a matrix as `type` (fp32 values quantized or rounded when type differs).
inline std::vector<uint8_t> matrix_bytes(const HostTensor& t, DType type) {
  if (t.dtype != DType::kF32 || type == DType::kF32) {
    const auto* p = static_cast<const uint8_t*>(t.ptr());
    return {p, p + t.n_bytes()};
  }
  std::vector<uint8_t> out(static_cast<size_t>(dtype_row_bytes(type, t.numel())));
  quantize_row(type, t.data.data(), out.data(), t.numel());
  return out;
}

inline GgufOutTensor vector_tensor(std::string name, const std::vector<float>& v) {
  GgufOutTensor t{std::move(name), {static_cast<int64_t>(v.size())}, 0, {}};
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  t.bytes.assign(p, p + v.size() * sizeof(float));
  return t;
}

inline GgufOutTensor matrix_tensor(std::string name, const HostTensor& m, DType type = DType::kF32) {
  const DType stored = m.dtype != DType::kF32 ? m.dtype : type;
  return {std::move(name), m.shape, ggml_id(stored), matrix_bytes(m, type)};
}

// llama.cpp's permutation of a "llama" q/k projection: HF row h*hd + j*hd/2 + i goes to
// h*hd + 2i + j (the inverse of llama_weights.cpp's unpermute_rows). fp32 rows.
inline HostTensor permute_rows(const HostTensor& t, int32_t n_heads, int32_t head_dim) {
  HostTensor out = t;
  const int64_t cols = t.shape.at(1);
  const int32_t half = head_dim / 2;
  for (int32_t h = 0; h < n_heads; ++h)
    for (int32_t i = 0; i < half; ++i)
      for (int32_t j = 0; j < 2; ++j) {
        const int64_t hf = int64_t{h} * head_dim + j * half + i;
        const int64_t gg = int64_t{h} * head_dim + 2 * i + j;
        std::memcpy(out.data.data() + gg * cols, t.data.data() + hf * cols, cols * sizeof(float));
      }
  return out;
}

// The GGUF file of a MoE model (fp32 weights except the experts, see MoeGgufOptions).
inline std::vector<uint8_t> moe_gguf_bytes(const ModelConfig& c, const ModelWeights& w,
                                           const MoeGgufOptions& opt = {}) {
  const std::string arch = gguf_arch_name(c.arch);
  auto key = [&](const char* k) { return arch + "." + k; };
  std::vector<std::pair<std::string, GgufMetaValue>> meta = {
      {"general.architecture", arch},
      {"general.name", std::string("test")},
      {key("block_count"), static_cast<uint32_t>(c.n_layers)},
      {key("context_length"), static_cast<uint32_t>(c.max_position)},
      {key("embedding_length"), static_cast<uint32_t>(c.dim)},
      {key("feed_forward_length"), static_cast<uint32_t>(c.ffn_dim)},
      {key("attention.head_count"), static_cast<uint32_t>(c.n_heads)},
      {key("attention.head_count_kv"), static_cast<uint32_t>(c.n_kv_heads)},
      {key("attention.key_length"), static_cast<uint32_t>(c.head_dim)},
      {key("attention.value_length"), static_cast<uint32_t>(c.head_dim)},
      {key("rope.dimension_count"), static_cast<uint32_t>(c.head_dim)},
      {key("rope.freq_base"), c.rope_theta},
      {key("attention.layer_norm_rms_epsilon"), c.rms_eps},
      {key("vocab_size"), static_cast<uint32_t>(c.vocab_size)},
      {key("expert_count"), static_cast<uint32_t>(c.moe.n_experts)},
      {key("expert_used_count"), static_cast<uint32_t>(c.moe.n_experts_used)},
  };
  if (c.arch == ModelArch::kQwen3Moe || c.arch == ModelArch::kQwen2Moe) {
    meta.emplace_back(key("expert_feed_forward_length"),
                      static_cast<uint32_t>(c.moe.expert_ffn_dim));
  }
  if (c.moe.shared_expert_ffn_dim > 0) {
    meta.emplace_back(key("expert_shared_feed_forward_length"),
                      static_cast<uint32_t>(c.moe.shared_expert_ffn_dim));
  }
  for (const auto& [k, v] : opt.extra) meta.emplace_back(arch + "." + k, v);

  std::vector<GgufOutTensor> ts;
  ts.push_back(matrix_tensor("token_embd.weight", w.tok_embd));
  const bool permute = c.arch == ModelArch::kMixtral && opt.permute_qk;
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    auto n = [i](const char* s) { return fmt::format("blk.{}.{}", i, s); };
    ts.push_back(vector_tensor(n("attn_norm.weight"), l.attn_norm));
    ts.push_back(matrix_tensor(n("attn_q.weight"),
                               permute ? permute_rows(l.wq.w, c.n_heads, c.head_dim) : l.wq.w));
    ts.push_back(matrix_tensor(n("attn_k.weight"),
                               permute ? permute_rows(l.wk.w, c.n_kv_heads, c.head_dim) : l.wk.w));
    ts.push_back(matrix_tensor(n("attn_v.weight"), l.wv.w));
    if (c.qkv_bias) {
      ts.push_back(vector_tensor(n("attn_q.bias"), l.wq.bias));
      ts.push_back(vector_tensor(n("attn_k.bias"), l.wk.bias));
      ts.push_back(vector_tensor(n("attn_v.bias"), l.wv.bias));
    }
    ts.push_back(matrix_tensor(n("attn_output.weight"), l.wo.w));
    if (c.qk_norm) {
      ts.push_back(vector_tensor(n("attn_q_norm.weight"), l.q_norm));
      ts.push_back(vector_tensor(n("attn_k_norm.weight"), l.k_norm));
    }
    ts.push_back(vector_tensor(n("ffn_norm.weight"), l.ffn_norm));
    ts.push_back(matrix_tensor(n("ffn_gate_inp.weight"), l.router.w));
    const std::pair<const char*, Linear MlpWeights::*> parts[] = {
        {"ffn_gate_exps.weight", &MlpWeights::w_gate},
        {"ffn_up_exps.weight", &MlpWeights::w_up},
        {"ffn_down_exps.weight", &MlpWeights::w_down}};
    for (const auto& [name, lin] : parts) {
      const HostTensor& first = (l.experts.at(0).*lin).w;
      GgufOutTensor t{n(name), {static_cast<int64_t>(l.experts.size()), first.shape[0],
                                first.shape[1]}, 0, {}};
      for (const MlpWeights& e : l.experts) {
        const HostTensor& m = (e.*lin).w;
        t.ggml_type = ggml_id(m.dtype != DType::kF32 ? m.dtype : opt.expert_type);
        const std::vector<uint8_t> bytes = matrix_bytes(m, opt.expert_type);
        t.bytes.insert(t.bytes.end(), bytes.begin(), bytes.end());
      }
      ts.push_back(std::move(t));
    }
    if (c.moe.shared_expert_ffn_dim > 0) {
      ts.push_back(matrix_tensor(n("ffn_gate_shexp.weight"), l.shared_expert.w_gate.w));
      ts.push_back(matrix_tensor(n("ffn_up_shexp.weight"), l.shared_expert.w_up.w));
      ts.push_back(matrix_tensor(n("ffn_down_shexp.weight"), l.shared_expert.w_down.w));
      ts.push_back(vector_tensor(n("ffn_gate_inp_shexp.weight"), l.shared_expert_gate.w.data));
    }
  }
  ts.push_back(vector_tensor("output_norm.weight", w.out_norm));
  if (!w.lm_head.w.empty()) ts.push_back(matrix_tensor("output.weight", w.lm_head.w));
  if (opt.edit) opt.edit(ts);
  return gguf_file_bytes(meta, ts);
}

}  // namespace detllm::testing
