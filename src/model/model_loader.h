// Opens a model by path — a GGUF file or a Hugging Face directory (config.json +
// *.safetensors, sharded or not) — and returns its validated config and fp32 weights. Also
// finds the embedded default model (SmolLM2-135M-Instruct) installed by scripts/setup.sh.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "model/config.h"
#include "model/llama_weights.h"

namespace detllm {

enum class ModelFormat : uint8_t { kGguf, kHuggingFace };

struct LoadedModel {
  std::string path;  // as given (file or directory)
  std::string name;  // for /v1/models and logs: file or directory name
  ModelFormat format = ModelFormat::kGguf;
  ModelConfig config;
  ModelWeights weights;
  uint64_t weights_hash = 0;  // XXH3 of the per-tensor XXH3s of the fp32 bits, in load order
};

// What load_model reads: everything, or the config alone (no tensor is read; weights stay
// empty and weights_hash 0) for work that needs only the shapes and vocabulary.
enum class LoadParts : uint8_t { kAll, kConfigOnly };

// The weights digest of LoadedModel::weights_hash, for weights changed after load (e.g.
// quantized to FP8 by --quantization fp8).
uint64_t hash_model_weights(const ModelWeights& w);

// progress(done, total) after each tensor. Throws detllm::Error with the path and problem.
std::unique_ptr<LoadedModel> load_model(const std::string& path,
                                        const std::function<void(size_t, size_t)>& progress = {},
                                        LoadParts parts = LoadParts::kAll);

// The default model's path: $DETLLM_DEFAULT_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf
// beside the executable's build directory or the current directory. "" when not installed.
std::string find_default_model();

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

}  // namespace detllm
