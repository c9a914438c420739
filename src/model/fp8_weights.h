// FP8 weights made at load from a bf16/fp16/fp32 checkpoint (`--quantization fp8`, vLLM's name):
// every projection of every layer (attention q/k/v/o, the MLP's or each expert's gate/up/down)
// held as FP8 rows with one scale per output channel (kernels/ref/fp8_linear.h fp8_quantize_weight_row:
// s_w = max|w| / 448, codes e4m3(w / s_w)), activations dynamic per token. The embedding and
// lm_head stay as stored, as in vLLM's online FP8. docs/models.md, "FP8".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/llama_weights.h"

namespace detllm {

// The FP8 rows quantize_weights_fp8 makes: per-channel kF8E4M3 (`--quantization fp8`), or
// kF8E4M3G128 — 128x128 block scales s = max|w| / 448 over each block, activations per token
// and 128-column group, the arithmetic of transformers' fp8 checkpoints (the conformance
// suite's "@fp8g" models).
enum class Fp8Rows : uint8_t { kChannel, kBlockG128 };

// The rows a model-name suffix names ("fp8": kChannel, "fp8g": kBlockG128, as in
// "tiny-llama@fp8g"); nullopt for any other suffix.
std::optional<Fp8Rows> fp8_rows_named(std::string_view suffix);

// In place: every layer projection, a mixture of experts' experts and shared expert included;
// the router and the shared-expert gate stay as stored (as published FP8 MoE checkpoints keep
// them). Throws for weights that are FP8 already.
void quantize_weights_fp8(ModelWeights& w, const ModelConfig& c, Fp8Rows rows = Fp8Rows::kChannel);

// True when any matrix of w is held as FP8 rows.
bool has_fp8_weights(const ModelWeights& w);

// True when the checkpoint stores FP8 KV scales (LayerWeights::kv_cache_scales).
bool has_checkpoint_kv_scales(const ModelWeights& w);

// The FP8 row types w's matrices are held in, each once, in DType order.
std::vector<DType> fp8_weight_dtypes(const ModelWeights& w);

// The FP8 KV cache's scales of layer `layer` (--kv-dtype fp8, docs/models.md "FP8 KV
// cache"): 2 n_kv_heads floats, K's scale of each KV head then V's, fixed at load from the
// weights alone (never from a live batch) as s = B / 448, B a bound on |k| (|v|) over every
// input that holds whatever the tokens: with g the attention norm's weight and u = the
// normalised input (Σ u² = dim), |k_d| = |Σ_j W[d, j] g_j u_j + bias_d|
// ≤ √dim · ‖W[d, :] ∘ g‖₂ + |bias_d| (Cauchy–Schwarz); Qwen3's k norm bounds it instead by
// √head_dim · |k_norm_d| (√kv_dim for OLMoE's whole-projection norm); RoPE rotates pairs
// (d, d + head_dim / 2), so K's bound is √(B_d² + B_{d+half}²). A head's scale is the largest
// bound of its dimensions / 448 (1 when 0). Sums in double, the scale rounded once to fp32.
// A checkpoint that stores its own (LayerWeights::kv_cache_scales, compressed-tensors'
// kv_cache_scheme) gives those instead: calibrated, so a value past one saturates at ±448.
std::vector<float> fp8_kv_scales(const ModelConfig& c, const ModelWeights& w, int32_t layer);

// The FP8 numerics class of w's FP8 matrices, for the fingerprint's backend build string:
// "fp8=<weight scales>/<activation scales>", weight scales "channel" or "block128" (both when
// mixed: "channel+block128"), activation scales "token" (dynamic), "token-group128" (dynamic
// per token and 128 columns: kF8E4M3G128), "token-bounded" (dynamic with fbgemm's bound),
// "static" (the checkpoint's input_scale), joined with "+" when mixed.
std::string fp8_class_name(const ModelWeights& w);

}  // namespace detllm
