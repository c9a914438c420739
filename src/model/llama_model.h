// The Llama-family forward pass over one batched step (tokens of several sequences at any
// positions), written once against kernels::Ops so every backend runs the same model code.
// Per token: embed → n_layers × (RMSNorm → q,k,v → [q/k norm] → RoPE → KV append → paged
// attention → o_proj → residual → RMSNorm → SwiGLU MLP → residual) → final norm → lm_head.
// Weights and activations live in the backend's memory (used in place on the CPU).
#pragma once

#include <span>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/kv_storage.h"
#include "model/llama_weights.h"

namespace detllm {

class LlamaModel {
 public:
  // The host weights and the ops must outlive the model. On a device backend the weights are
  // uploaded here (converted to the backend's weight dtype).
  LlamaModel(const ModelConfig& config, const ModelWeights& weights, kernels::Ops& ops);
  ~LlamaModel();

  const ModelConfig& config() const { return config_; }
  kernels::Ops& ops() const { return ops_; }

  // Runs one step. tokens (n_tokens, host) are described by batch (host arrays: positions,
  // sequences, KV slots, block tables). For each entry r of logit_rows (indices into tokens),
  // writes that token's logits to logits[r_index * vocab … +vocab) on the host: logits is
  // resized to (logit_rows.size(), vocab).
  void forward(std::span<const int32_t> tokens, const kernels::StepBatch& batch,
               std::span<const int32_t> logit_rows, KvStorage& kv,
               std::vector<float>& logits) const;

 private:
  struct LinearView {
    kernels::WeightMatrix w;
    const float* bias = nullptr;
  };
  struct LayerView {
    const float* attn_norm;  // (dim)
    LinearView wq, wk, wv, wo, w_gate, w_up, w_down;
    const float* q_norm;     // (head_dim) or nullptr
    const float* k_norm;     // (head_dim) or nullptr
    const float* ffn_norm;   // (dim)
  };
  // Activations of one step, in backend memory, grown to the largest step seen.
  struct Workspace;

  const float* place(const std::vector<float>& v);
  kernels::WeightMatrix place(const HostTensor& t);
  LinearView place(const Linear& l);

  const ModelConfig config_;
  kernels::Ops& ops_;
  kernels::RopeTable rope_;
  std::vector<kernels::Buffer> owned_;  // uploaded weights (device backends only)
  kernels::WeightMatrix tok_embd_;      // (vocab, dim)
  std::vector<LayerView> layers_;       // (n_layers)
  const float* out_norm_ = nullptr;     // (dim)
  kernels::WeightMatrix lm_head_;       // (vocab, dim)
  std::unique_ptr<Workspace> ws_;
};

}  // namespace detllm
