// The Llama-family forward pass over one batched step (tokens of several sequences at any
// positions), written once against kernels::Ops so every backend runs the same model code.
// Per token: embed → n_layers × (RMSNorm → q,k,v → [q/k norm] → RoPE → KV append → paged
// attention → o_proj → residual → RMSNorm → SwiGLU MLP → residual) → final norm → lm_head.
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
  // The weights and ops must outlive the model.
  LlamaModel(const ModelConfig& config, const ModelWeights& weights, kernels::Ops& ops);

  const ModelConfig& config() const { return config_; }
  kernels::Ops& ops() const { return ops_; }

  // Runs one step. tokens (n_tokens) are described by batch (positions, sequences, KV slots).
  // For each entry r of logit_rows (indices into tokens), writes that token's logits to
  // logits[r_index * vocab … +vocab): logits is resized to (logit_rows.size(), vocab).
  void forward(std::span<const int32_t> tokens, const kernels::StepBatch& batch,
               std::span<const int32_t> logit_rows, KvStorage& kv,
               std::vector<float>& logits) const;

 private:
  const ModelConfig config_;
  const ModelWeights& weights_;
  kernels::Ops& ops_;
  kernels::RopeTable rope_;
};

}  // namespace detllm
