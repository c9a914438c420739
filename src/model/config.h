// ModelConfig: the one description of a Llama-family model (Llama 2/3/3.1, SmolLM2, Mistral,
// Qwen2/2.5, Qwen3, and the mixture-of-experts Qwen3-MoE, Mixtral, Qwen2-MoE), read from GGUF
// metadata (config_gguf.cpp) or a Hugging Face config.json in either transformers format
// (config_hf.cpp) and validated once at load. A setting that changes numerics and that is not
// implemented is refused by name, never defaulted (docs/models.md).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace detllm {

class GgufFile;

enum class ModelArch : uint8_t {
  kLlama,
  kMistral,
  kQwen2,
  kQwen3,
  kQwen3Moe,
  kMixtral,
  kQwen2Moe,
  kOlmoe
};

std::string_view model_arch_name(ModelArch arch);

// RoPE frequency scaling. kLlama3 is Llama 3.1's smooth low/high frequency rescaling;
// kFactors divides each frequency by a per-pair factor (GGUF's rope_freqs tensor).
struct RopeScaling {
  enum class Type : uint8_t { kNone, kLinear, kLlama3 } type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int32_t original_max_position = 8192;
};

// Mixture of experts (model/moe_ffn.h): every layer's MLP is n_experts SwiGLU experts of
// expert_ffn_dim, of which each token uses the n_experts_used with the highest router logits
// (ties: the lower expert index), weighted by their softmax probabilities (kernels/ops.h
// Ops::moe_route). n_experts == 0: a dense model.
struct MoeConfig {
  int32_t n_experts = 0;
  int32_t n_experts_used = 0;  // top-k
  int32_t expert_ffn_dim = 0;
  // The k weights renormalised to sum 1 (Mixtral always; Qwen: norm_topk_prob), else the
  // chosen experts' probabilities over all experts.
  bool renormalize = false;
  // Qwen2-MoE: a shared SwiGLU expert of this size on every token, scaled by
  // sigmoid(shared_expert_gate · x); 0: none.
  int32_t shared_expert_ffn_dim = 0;

  bool active() const { return n_experts > 0; }
};

// FP8 weights (docs/models.md, "FP8"; the arithmetic: kernels/ref/fp8_linear.h): read from a
// checkpoint's quantization_config (config_fp8.cpp: compressed-tensors float-quantized or
// fbgemm_fp8). source kNone: the weights are used as stored.
struct Fp8Config {
  // kFineGrained: transformers' quant_method "fp8" (FineGrainedFP8Config: Qwen3-*-FP8,
  // DeepSeek-V3): 128x128 block weight scales (`weight_scale_inv`), activations dynamic per
  // token and 128-column group (DType::kF8E4M3G128).
  enum class Source : uint8_t { kNone, kCompressedTensors, kFbgemm, kFineGrained };
  enum class WeightScales : uint8_t { kChannel, kTensor, kBlock };  // the checkpoint's strategy
  Source source = Source::kNone;
  WeightScales weight_scales = WeightScales::kChannel;
  bool static_activations = false;  // an input_scale tensor per layer; else dynamic per token
  float activation_bound = 0.0f;    // fbgemm_fp8 activation_scale_ub (0: none)
  // Modules kept unquantized ("lm_head", ...). compressed-tensors' `ignore` names modules
  // exactly; transformers' modules_to_not_convert (fbgemm_fp8, fp8) also names a subtree
  // ("model.layers.0" keeps everything under it) or a module's trailing names ("mlp.gate" keeps
  // every layer's router).
  std::vector<std::string> ignore;
  // compressed-tensors' kv_cache_scheme: the checkpoint's FP8 KV scales, per layer
  // `self_attn.k_scale` / `v_scale`, one per tensor or one per KV head (LayerWeights::
  // kv_cache_scales). kNone: no scheme; --kv-dtype fp8 then bounds its scales from the weights.
  enum class KvScales : uint8_t { kNone, kTensor, kHead };
  KvScales kv_scales = KvScales::kNone;
  bool active() const { return source != Source::kNone; }
  // True when the module (e.g. "model.layers.0.self_attn.q_proj", "lm_head") is quantized.
  bool quantizes(const std::string& module) const;
};

struct ModelConfig {
  ModelArch arch = ModelArch::kLlama;
  int32_t vocab_size = 0;
  int32_t dim = 0;         // hidden size
  int32_t n_layers = 0;
  int32_t n_heads = 0;     // query heads
  int32_t n_kv_heads = 0;  // key/value heads (GQA: n_heads % n_kv_heads == 0)
  int32_t head_dim = 0;
  int32_t ffn_dim = 0;     // intermediate size of the SwiGLU MLP
  int32_t max_position = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;  // lm_head shares the token embedding
  bool qkv_bias = false;         // Qwen2/2.5
  bool qk_norm = false;          // Qwen3: RMSNorm on each q/k head before RoPE
  // OLMoE: the q/k RMSNorm spans the whole projection — q_norm (q_dim), k_norm (kv_dim), one
  // RMS over all heads of a token — instead of each head (needs qk_norm).
  bool qk_norm_full = false;
  int32_t q_norm_dim() const { return qk_norm_full ? q_dim() : head_dim; }
  int32_t k_norm_dim() const { return qk_norm_full ? kv_dim() : head_dim; }
  // The checkpoint's sliding window, 0 if none. Attention here is full; max_position is capped
  // to the window, where full attention and sliding-window attention are the same function.
  int32_t sliding_window = 0;
  std::string checkpoint_dtype;  // config.json dtype/torch_dtype as written ("" = not given)
  MoeConfig moe;                 // n_experts == 0: dense
  Fp8Config fp8;                 // FP8 checkpoint (quantization_config); inactive: none

  int32_t q_dim() const { return n_heads * head_dim; }
  int32_t kv_dim() const { return n_kv_heads * head_dim; }

  // Throws detllm::Error naming the offending field and `source` when inconsistent.
  void validate(const std::string& source) const;

  // RoPE inverse frequencies in fp32, with the scaling applied (HF's computation order).
  kernels::RopeTable rope_table() const;

  static ModelConfig from_gguf(const GgufFile& gguf);
  // config.json's quantization_config (config_fp8.cpp); throws naming any key it refuses.
  static Fp8Config fp8_from_hf(const nlohmann::json& q, const std::string& path);
  static ModelConfig from_hf_config(const nlohmann::json& config, const std::string& path);
};

}  // namespace detllm
