// Validation of DrawParams, SamplingParams and SampleRowParams: every out-of-range or
// non-finite value is rejected with a message that names the field and the allowed range,
// before any token is sampled.
#include "kernels/sampling/sampling_params.h"

#include <cmath>

#include "core/error.h"
#include "kernels/sampling/sample_row.h"

namespace detllm {

void DrawParams::validate() const {
  check(std::isfinite(temperature) && temperature >= 0.0f,
        "sampling: temperature must be a finite number >= 0 (0 = greedy), got {}", temperature);
  check(top_k >= -1, "sampling: top_k must be >= 1, or 0 / -1 to disable it, got {}", top_k);
  check(std::isfinite(top_p) && top_p > 0.0f && top_p <= 1.0f,
        "sampling: top_p must be in (0, 1] (1 = disabled), got {}", top_p);
  check(std::isfinite(min_p) && min_p >= 0.0f && min_p <= 1.0f,
        "sampling: min_p must be in [0, 1] (0 = disabled), got {}", min_p);
  check(n_logprobs >= 0 && n_logprobs <= kMaxLogprobs,
        "sampling: logprobs must be in [0, {}], got {}", kMaxLogprobs, n_logprobs);
}

void SampleRowParams::validate() const {
  DrawParams::validate();
  check(score_token >= -1, "sampling: score_token must be a token id or -1, got {}", score_token);
  check(score_token == -1 || temperature == 0.0f,
        "sampling: a scoring row (score_token {}) draws nothing: its temperature must be 0, got {}",
        score_token, temperature);
}

void SamplingParams::validate() const {
  DrawParams::validate();
  check(std::isfinite(presence_penalty) && presence_penalty >= -2.0f && presence_penalty <= 2.0f,
        "sampling: presence_penalty must be in [-2, 2] (0 = off), got {}", presence_penalty);
  check(std::isfinite(frequency_penalty) && frequency_penalty >= -2.0f && frequency_penalty <= 2.0f,
        "sampling: frequency_penalty must be in [-2, 2] (0 = off), got {}", frequency_penalty);
  check(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f &&
            repetition_penalty <= kMaxRepetitionPenalty,
        "sampling: repetition_penalty must be in (0, {}] (1 = off), got {}", kMaxRepetitionPenalty,
        repetition_penalty);
  check(logit_bias.size() <= static_cast<size_t>(kMaxLogitBias),
        "sampling: logit_bias has {} entries; at most {} are accepted", logit_bias.size(),
        kMaxLogitBias);
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const LogitBias& b = logit_bias[i];
    check(b.token >= 0, "sampling: logit_bias token id {} is negative", b.token);
    check(i == 0 || logit_bias[i - 1].token < b.token,
          "sampling: logit_bias token ids must be strictly ascending (token {} after {})", b.token,
          i == 0 ? 0 : logit_bias[i - 1].token);
    check(std::isfinite(b.bias) && b.bias >= -100.0f && b.bias <= 100.0f,
          "sampling: logit_bias of token {} must be in [-100, 100], got {}", b.token, b.bias);
  }
}

void SamplingParams::validate(int32_t vocab_size) const {
  validate();
  for (const LogitBias& b : logit_bias) {
    check(b.token < vocab_size, "sampling: logit_bias token id {} is outside the vocabulary (0…{})",
          b.token, vocab_size - 1);
  }
}

}  // namespace detllm
