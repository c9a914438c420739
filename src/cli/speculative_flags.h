// The speculative-decoding flags of `detllm generate` and `detllm serve` (vLLM's names):
// --speculative-method none|ngram|draft_model, --num-speculative-tokens K,
// --prompt-lookup-min N, --prompt-lookup-max N, --speculative-model PATH (implies
// draft_model), --speculative-config JSON (vLLM's newest form: {"method": ..., "model": ...,
// "num_speculative_tokens": ..., "prompt_lookup_min": ..., "prompt_lookup_max": ...}) and
// --[no-]speculative-adaptive. They fill engine::SpeculativeConfig (docs/speculative.md); the
// output is the same bits with or without them.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "cli/backend.h"
#include "engine/engine_config.h"
#include "model/bundle.h"

namespace detllm {
class Tokenizer;
}

namespace detllm::cli {

void add_speculative_options(CLI::App& cmd, engine::SpeculativeConfig& config);

// Fills `config` from a --speculative-config JSON object; a key detllm does not read is refused
// by name. Throws detllm::Error.
void apply_speculative_config_json(const std::string& json, engine::SpeculativeConfig& config);

// The draft model of the draft_model method (config.model), loaded on a backend from
// `make_draft_backend` (made like the target's). Its tokenizer must be the target's, token for
// token: a draft model with another vocabulary is refused by name. An empty bundle (no model)
// for the other methods. Throws detllm::Error.
ModelBundle load_draft_model(const engine::SpeculativeConfig& config, const Tokenizer& target,
                             const std::function<Backend()>& make_draft_backend, int n_threads);

}  // namespace detllm::cli
