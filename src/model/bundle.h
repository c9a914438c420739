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
#include "tokenizer/tokenizer.h"

namespace detllm {

struct ModelBundle {
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<kernels::Ops> ops;
  std::unique_ptr<LlamaModel> llama;
};

// path "" = the embedded default model (error telling how to install it when missing).
ModelBundle open_model_bundle(const std::string& path, int n_threads,
                              const std::function<void(size_t, size_t)>& progress = {});
// The config and tokenizer only (LoadParts::kConfigOnly): no weights, ops or forward — for
// work that needs the shapes, vocabulary and text, like making a request file.
ModelBundle open_model_header(const std::string& path);

}  // namespace detllm
