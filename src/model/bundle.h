// ModelBundle: everything needed to run a model, opened in one call — weights and config
// (model_loader), tokenizer (from the GGUF or tokenizer.json beside the safetensors), the
// backend ops and the forward. Used by the CLI commands and the server.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "kernels/ops.h"
#include "model/llama_model.h"
#include "model/model_loader.h"
#include "model/tp_group.h"
#include "tokenizer/tokenizer.h"

namespace detllm {

struct ModelBundle {
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<kernels::Ops> ops;
  std::unique_ptr<LlamaModel> llama;
  // Tensor parallelism (--tensor-parallel, backends::install_backend): the ranks, each with its
  // own ops; ops and llama are then null and the engine runs the group's leader.
  std::unique_ptr<TpGroup> tp;
  // The projections were quantized to FP8 by an earlier install_backend (--quantization fp8):
  // installing again (bench's next mode) keeps them, and refuses only a checkpoint that ships
  // FP8 weights.
  bool fp8_made_at_load = false;

  // The model the engine runs: llama, or tp's leader.
  LlamaModel& engine_model() const;
  // The config whose KV bytes per token are what the device holds for one token of the pool:
  // the model's, or with tp every rank's KV heads together (its ranks share one device and
  // each mirrors the leader's blocks; a KV head replicated on several ranks counts each time).
  ModelConfig kv_memory_config() const;
};

// path "" = the embedded default model (error telling how to install it when missing).
ModelBundle open_model_bundle(const std::string& path, int n_threads,
                              const std::function<void(size_t, size_t)>& progress = {});
// The config and tokenizer only (LoadParts::kConfigOnly): no weights, ops or forward — for
// work that needs the shapes, vocabulary and text, like making a request file.
ModelBundle open_model_header(const std::string& path);

}  // namespace detllm
