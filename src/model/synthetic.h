// Synthetic models: a configuration by name and weights generated from a seed, so tests and
// performance runs need no file (tiny models for the CPU conformance suite, Llama-3.1-8B's
// shapes for GPU benchmarks). The generator is a portable counter-based hash: the same seed
// gives the same weights on every machine.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/llama_weights.h"

namespace detllm {

// Names: "tiny-llama" (GQA, tied embeddings), "tiny-qwen2" (qkv bias), "tiny-qwen3" (q/k norm,
// head_dim != dim / n_heads), "llama-3.1-8b" (real shapes, llama3 RoPE scaling).
// Throws detllm::Error listing the names for an unknown one.
ModelConfig synthetic_config(std::string_view name);
std::vector<std::string_view> synthetic_config_names();

// Weights uniform in ±1/sqrt(fan_in) (norm weights near 1), drawn from `seed`.
ModelWeights make_synthetic_weights(const ModelConfig& config, uint64_t seed);

}  // namespace detllm
