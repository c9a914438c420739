// Hugging Face parameter names → the host fp32 weights (ModelWeights) they live in, and the
// checked copy of caller tensors into them (api::LlmSession::update_weights, and detllm serve's
// weight-sync endpoints: server/weight_sync.h). GGUF q/k rows were
// un-permuted at load (llama_weights.h), so HF's q_proj/k_proj layout is the engine's.
// Widening bf16/f16 to fp32 is exact: the engine then computes on exactly the caller's values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/llama_model.h"
#include "model/llama_weights.h"

namespace detllm {

// One parameter: where its fp32 values are, the shape HF gives it and which of the model's
// tensors it is (LlamaModel::placed: where a device backend holds it).
struct ParameterSlot {
  std::string name;
  std::vector<int64_t> shape;
  float* data = nullptr;  // (numel) host fp32, inside ModelWeights; null without a host copy
  LlamaModel::Param param = LlamaModel::Param::kTokEmbd;
  int32_t layer = 0;
  int32_t expert = 0;  // the expert of a mixture-of-experts kExpert* parameter
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Every parameter of `w` by HF name, in HF order. A model with tied embeddings also lists
// "lm_head.weight" as an alias of model.embed_tokens.weight (HF's state_dict has both).
// w == nullptr: the names and shapes of `config`'s parameters, data null (a model whose
// weights exist only in device memory: a synthetic one generated there).
std::vector<ParameterSlot> parameter_slots(const ModelConfig& config, ModelWeights* w);

// A tensor to write: its name, shape, dtype name and host data (contiguous, row-major).
struct WeightSource {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;  // float32 | bfloat16 | float16
  const void* data = nullptr;
  bool on_device = false;  // data is device memory (not read by check_weights)
};

// Checks every source against `slots` (known name, equal shape, a supported dtype, a name given
// once, tied names with equal values) and throws detllm::Error listing every offending name
// with what to do. Returns, per source, the index of its slot. Device-memory sources
// (on_device) are not read: their tied-value check is the caller's.
std::vector<size_t> check_weights(std::span<const ParameterSlot> slots,
                                  std::span<const WeightSource> sources);

// src's values widened to fp32 into dst (n elements; float32, bfloat16 or float16 host data).
void widen_to_f32(const WeightSource& src, float* dst, size_t n);

// check_weights, then every source widened into its slot's host fp32 values.
void write_weights(std::span<const ParameterSlot> slots, std::span<const WeightSource> sources);

}  // namespace detllm
