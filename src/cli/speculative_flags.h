// The speculative-decoding flags of `detllm generate` and `detllm serve` (vLLM's names):
// --speculative-method none|ngram, --num-speculative-tokens K, --prompt-lookup-min N,
// --prompt-lookup-max N. They fill engine::SpeculativeConfig (docs/speculative.md); the output
// is the same bits with or without them.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/engine_config.h"

namespace detllm::cli {

void add_speculative_options(CLI::App& cmd, engine::SpeculativeConfig& config);

}  // namespace detllm::cli
