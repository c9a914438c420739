// The weights of a Llama-family model in host memory, mapped from a file's own tensor names
// (GGUF or Hugging Face) and checked against ModelConfig shapes. Matrices are kept as the file
// stores them where the kernels read that type (GGUF f16/bf16/Q4_0/Q4_1/Q8_0/Q4_K/Q6_K,
// WeightStorage::kStored) or widened to fp32; norms and biases are always fp32. GGUF "llama" files store
// q/k rows permuted for llama.cpp's interleaved RoPE; they are un-permuted here so that one
// RoPE (HF's half-split) serves every format.
#pragma once

#include <functional>
#include <vector>

#include "formats/tensor_source.h"
#include "kernels/ops.h"
#include "model/config.h"

namespace detllm {

// A linear layer's weight in host memory and the backend's view of it.
struct Linear {
  HostTensor w;            // (out_features, in_features) of w.dtype
  std::vector<float> bias;  // (out_features) or empty
  kernels::WeightMatrix view() const { return {w.ptr(), w.dtype, w.shape.at(0), w.shape.at(1)}; }
  const float* bias_ptr() const { return bias.empty() ? nullptr : bias.data(); }
};

// One SwiGLU MLP: down(silu(gate x) * up x).
struct MlpWeights {
  Linear w_gate;  // (ffn, dim)
  Linear w_up;    // (ffn, dim)
  Linear w_down;  // (dim, ffn)
};

struct LayerWeights {
  std::vector<float> attn_norm;  // (dim)
  Linear wq;                     // (n_heads * head_dim, dim)
  Linear wk;                     // (n_kv_heads * head_dim, dim)
  Linear wv;                     // (n_kv_heads * head_dim, dim)
  Linear wo;                     // (dim, n_heads * head_dim)
  std::vector<float> q_norm;     // (head_dim), Qwen3 only
  std::vector<float> k_norm;     // (head_dim), Qwen3 only
  std::vector<float> ffn_norm;   // (dim)
  Linear w_gate;                 // (ffn_dim, dim)
  Linear w_up;                   // (ffn_dim, dim)
  Linear w_down;                 // (dim, ffn_dim)
  // Mixture of experts (ModelConfig::moe active): these replace w_gate/w_up/w_down (empty).
  Linear router;                    // (n_experts, dim)
  std::vector<MlpWeights> experts;  // (n_experts), each of expert_ffn_dim
  MlpWeights shared_expert;         // Qwen2-MoE: of shared_expert_ffn_dim; else empty
  Linear shared_expert_gate;        // Qwen2-MoE: (1, dim); else empty
  // A compressed-tensors checkpoint's FP8 KV scales (quantization_config.kv_cache_scheme):
  // K's scale of each KV head then V's (2 n_kv_heads; a per-tensor scale repeated), the FP8 KV
  // cache's scales under --kv-dtype fp8 (fp8_kv_scales). Empty: none in the checkpoint.
  std::vector<float> kv_cache_scales;

  // Every matrix of the layer that is present, in a fixed order (attention, MLP, router,
  // experts, shared expert, its gate).
  std::vector<const Linear*> matrices() const;
  std::vector<Linear*> matrices();
};

struct ModelWeights {
  HostTensor tok_embd;                   // (vocab, dim)
  std::vector<LayerWeights> layers;      // (n_layers)
  std::vector<float> out_norm;           // (dim)
  Linear lm_head;                        // (vocab, dim); empty when tied to tok_embd
  std::vector<float> rope_freq_factors;  // (head_dim / 2) divisors from GGUF rope_freqs, or empty

  const HostTensor& lm_head_tensor() const {
    return lm_head.w.empty() ? tok_embd : lm_head.w;
  }
};

enum class WeightNaming : uint8_t { kGguf, kHuggingFace };

// How matrices are held: as the file stores them (TensorSource::load_stored; LlamaModel
// converts for backends that cannot read the type, with the same bits) or widened to fp32.
enum class WeightStorage : uint8_t { kStored, kF32 };

// progress(done, total) is called after each tensor (for the load indicator).
ModelWeights load_weights(const TensorSource& source, WeightNaming naming,
                          const ModelConfig& config,
                          const std::function<void(size_t, size_t)>& progress = {},
                          WeightStorage storage = WeightStorage::kStored);

// Every matrix of w in fp32 (formats/dequant.h dequantize_tensor): the same values.
void dequantize_weights(ModelWeights& w);

}  // namespace detllm
