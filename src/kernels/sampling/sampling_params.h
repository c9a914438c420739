// Per-request sampling parameters: one struct, validated once when the request is built and
// then passed by const& to the sampler. The seed is part of the determinism contract
// (design.md §1): same parameters + same logits -> same token.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/sampling/logit_penalties.h"

namespace detllm {

struct SamplingParams {
  static constexpr int32_t kMaxLogprobs = 20;  // as OpenAI's top_logprobs

  float temperature = 1.0f;  // >= 0; 0 = greedy (argmax, lowest token id among ties)
  int32_t top_k = 0;         // keep the k most likely tokens; 0 or -1 = off
  float top_p = 1.0f;        // nucleus mass in (0, 1]; 1 = off
  float min_p = 0.0f;        // keep p >= min_p * p_max, in [0, 1]; 0 = off
  uint64_t seed = 0;         // Philox key; a request without one gets it from the server
  int32_t n_logprobs = 0;    // number of top logprobs returned per token, 0 .. kMaxLogprobs

  // Logit penalties, applied before the sampler (kernels/sampling/logit_penalties.h has the
  // formula and which tokens count). The neutral values turn them off.
  static constexpr int32_t kMaxLogitBias = 1024;
  static constexpr float kMaxRepetitionPenalty = 100.0f;
  float presence_penalty = 0.0f;      // [-2, 2], OpenAI's; over the generated tokens
  float frequency_penalty = 0.0f;     // [-2, 2], OpenAI's; times the count in the generated tokens
  float repetition_penalty = 1.0f;    // (0, kMaxRepetitionPenalty]; over prompt + generated
  std::vector<LogitBias> logit_bias;  // token ids strictly ascending, bias in [-100, 100]

  bool is_greedy() const { return temperature == 0.0f; }
  bool top_k_enabled() const { return top_k > 0; }
  bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f ||
           !logit_bias.empty();
  }

  // Throws detllm::Error naming the field, its value and the allowed range.
  void validate() const;
  // validate(), and every logit_bias token id inside the vocabulary (0 .. vocab_size - 1).
  void validate(int32_t vocab_size) const;
};

}  // namespace detllm
