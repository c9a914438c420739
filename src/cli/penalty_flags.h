// The logit-penalty flags of `detllm generate` (--presence-penalty, --frequency-penalty,
// --repetition-penalty, --logit-bias ID:BIAS,...): the server's fields (docs/server.md,
// "Penalties") with the same ranges and the same conversion to fp32, so a request made with
// these flags samples the same tokens as the same request over HTTP.
#pragma once

#include <CLI/CLI.hpp>

#include <string_view>
#include <vector>

#include "kernels/sampling/sampling_params.h"

namespace detllm::cli {

// Parsed as doubles, as the server's JSON numbers are, then rounded once to fp32.
struct PenaltyFlags {
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  std::vector<LogitBias> logit_bias;  // ascending token ids
};

// "ID:BIAS[,ID:BIAS...]" -> entries sorted by token id. Throws detllm::Error naming the bad
// entry: an ID that is not a decimal integer 0..2^31-1, a BIAS that is not a finite number in
// [-100, 100], a token listed twice, more than SamplingParams::kMaxLogitBias entries, or an
// empty list. The vocabulary is checked when the request is added to the engine.
std::vector<LogitBias> parse_logit_bias_list(std::string_view text);

void add_penalty_options(CLI::App& cmd, PenaltyFlags& flags);

// Writes the flags into the request's sampling parameters (static_cast<float> of the doubles:
// the server's conversion of its JSON values).
void apply_penalty_flags(const PenaltyFlags& flags, SamplingParams& sampling);

}  // namespace detllm::cli
