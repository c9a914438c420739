// Per-request sampling parameters: the sampler's DrawParams and the logit penalties, validated
// once when the request is built. The seed is part of the determinism contract
// (design.md §1): same parameters + same logits -> same token.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/sampling/draw_params.h"
#include "kernels/sampling/logit_penalties.h"

namespace detllm {

// DrawParams' fields (temperature, top_k, top_p, min_p, seed, n_logprobs) and the penalties.
struct SamplingParams : DrawParams {
  // Logit penalties, applied before the sampler (kernels/sampling/logit_penalties.h has the
  // formula and which tokens count). The neutral values turn them off.
  static constexpr int32_t kMaxLogitBias = 1024;
  static constexpr float kMaxRepetitionPenalty = 100.0f;
  float presence_penalty = 0.0f;      // [-2, 2], OpenAI's; over the generated tokens
  float frequency_penalty = 0.0f;     // [-2, 2], OpenAI's; times the count in the generated tokens
  float repetition_penalty = 1.0f;    // (0, kMaxRepetitionPenalty]; over prompt + generated
  std::vector<LogitBias> logit_bias;  // token ids strictly ascending, bias in [-100, 100]

  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f ||
           !logit_bias.empty();
  }

  // DrawParams::validate() and the penalties' ranges: throws detllm::Error naming the field,
  // its value and the allowed range.
  void validate() const;
  // validate(), and every logit_bias token id inside the vocabulary (0 .. vocab_size - 1).
  void validate(int32_t vocab_size) const;
};

}  // namespace detllm
