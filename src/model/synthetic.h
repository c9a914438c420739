// Synthetic models: a configuration by name and weights generated from a seed, so tests and
// performance runs need no file (tiny models for the CPU conformance suite, Llama-3.1-8B's
// shapes for GPU benchmarks). The generator is a portable counter-based hash
// (kernels/synthetic_values.h): the same seed gives the same weights on every machine and
// every backend. A recipe lists each tensor's key and range without its values, so a backend
// can generate the weights in its own memory (LlamaModel's recipe constructor, through
// Ops::fill_uniform) — the 8B model never exists on the host.
// Tests: tests/model/synthetic_backend_test.cpp, tests/cuda/cuda_synthetic_test.cpp.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/llama_weights.h"

namespace detllm {

// Names: "tiny-llama" (GQA, tied embeddings), "tiny-qwen2" (qkv bias), "tiny-qwen3" (q/k norm,
// head_dim != dim / n_heads), "tiny-qwen3-moe" (tiny-qwen3's attention, 16 experts of 32, top-4
// renormalised, router rows repeating so that routing ties happen: kSyntheticRouterPeriod),
// "mini-olmoe" (OLMoE's mixture — 64 experts of 256, top-8, not renormalised, q/k norms over
// the whole projections — on 4 layers of dim 512, vocab 8192: a real-shaped MoE for CPU
// benchmarks; its router rows are distinct), "llama-3.1-8b" (real shapes, llama3 RoPE scaling),
// and two mixture-of-experts shapes for GPU benchmarks: "olmoe-1b-7b" (16 layers, hidden 2048,
// 64 experts of 1024, top-8 not renormalised; its attention as Qwen3's, per-head q/k norms) and
// "qwen3-30b-a3b" (48 layers, hidden 2048, 32/4 heads of 128, 128 experts of 768, top-8
// renormalised; ~61 GB in bf16).
// Throws detllm::Error listing the names for an unknown one.
ModelConfig synthetic_config(std::string_view name);
std::vector<std::string_view> synthetic_config_names();

// One synthetic tensor before its values exist: element i (row-major) is
// kernels::synthetic_value(key, i, center, scale). rows == 0: absent (no bias, tied lm_head).
struct SyntheticTensor {
  int64_t rows = 0;  // a vector is (rows, 1)
  int64_t cols = 0;
  uint64_t key = 0;
  float center = 0.0f;
  float scale = 0.0f;

  bool empty() const { return rows == 0; }
  int64_t numel() const { return rows * cols; }
};

struct SyntheticLinear {
  SyntheticTensor w;     // (out_features, in_features)
  SyntheticTensor bias;  // (out_features, 1) or empty
};

struct SyntheticExpert {
  SyntheticLinear w_gate, w_up, w_down;  // as MlpWeights
};

// A synthetic MoE router of at most 16 experts (the tiny models) has this many distinct rows:
// row e is row e % period, so every token's router logits hold exact ties (groups of 4 and 3
// equal logits among 16 experts) and the tie rule (lower expert index first) decides routing
// in every step. Larger routers (the benchmark shapes) have distinct rows, so tokens spread
// over the experts as under a trained router instead of piling onto a few tied groups.
inline constexpr int32_t kSyntheticRouterPeriod = 5;
// The router's distinct rows: kSyntheticRouterPeriod for at most 16 experts (tiny-qwen3-moe:
// ties on purpose), every expert's own row otherwise.
int32_t synthetic_router_rows(const ModelConfig& config);

struct SyntheticLayer {
  SyntheticTensor attn_norm;       // (dim, 1)
  SyntheticLinear wq, wk, wv, wo;  // as LayerWeights
  SyntheticTensor q_norm, k_norm;  // (q/k_norm_dim, 1), Qwen3 and OLMoE only
  SyntheticTensor ffn_norm;        // (dim, 1)
  SyntheticLinear w_gate, w_up, w_down;  // dense layers
  SyntheticTensor router;                // MoE: (synthetic_router_rows, dim), rows repeated
  std::vector<SyntheticExpert> experts;  // MoE: (n_experts)
};

// Every tensor of a synthetic model, mirroring ModelWeights.
struct SyntheticWeights {
  SyntheticTensor tok_embd;            // (vocab, dim)
  std::vector<SyntheticLayer> layers;  // (n_layers)
  SyntheticTensor out_norm;            // (dim, 1)
  SyntheticTensor lm_head;             // (vocab, dim); empty when tied to tok_embd

  // Bytes of every tensor at `matrix_bytes` per matrix element and 4 per vector element.
  size_t bytes(size_t matrix_bytes) const;
};

// The recipe of make_synthetic_weights(config, seed): the one place that fixes the order in
// which tensors are drawn (the order is part of the values).
SyntheticWeights synthetic_recipe(const ModelConfig& config, uint64_t seed);

// A recipe tensor's values on the host (fp32).
std::vector<float> synthetic_values(const SyntheticTensor& t);

// Weights uniform in ±1/sqrt(fan_in) (norm weights near 1), drawn from `seed` on the host.
ModelWeights make_synthetic_weights(const ModelConfig& config, uint64_t seed);

// Every matrix of w (embeddings, projections, router, experts, lm_head) held as the GGUF block
// type `type` (Q8_0, Q4_0 or Q4_1: core/quant.h quantize_row), as a quantized GGUF file of
// the same model would hold it.
void quantize_synthetic_weights(ModelWeights& w, DType type);

}  // namespace detllm
