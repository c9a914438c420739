// Request validation and names.
#include "engine/request.h"

#include "core/error.h"

namespace detllm::engine {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kGrammar: return "grammar";
  }
  return "?";
}

void Request::validate(int32_t vocab_size, int32_t max_model_len) const {
  check(!prompt.empty(), "the prompt is empty: give at least one token");
  for (int32_t t : prompt) {
    check(t >= 0 && t < vocab_size, "prompt token id {} is outside the vocabulary (0…{})", t,
          vocab_size - 1);
  }
  for (int32_t t : stop_token_ids) {
    check(t >= 0 && t < vocab_size, "stop token id {} is outside the vocabulary", t);
  }
  for (const auto& s : stop) check(!s.empty(), "stop strings must not be empty");
  check(max_tokens >= 0, "max_tokens must be >= 0, got {}", max_tokens);
  check(n >= 1 && n <= 128, "n must be in 1…128, got {}", n);
  check(prompt_logprobs >= -1 && prompt_logprobs <= SamplingParams::kMaxLogprobs,
        "prompt_logprobs must be in 0…{} (or -1 for off), got {}", SamplingParams::kMaxLogprobs,
        prompt_logprobs);
  check(max_tokens > 0 || prompt_logprobs >= 0 || capture_logits,
        "max_tokens is 0 and nothing is asked of the prompt: set max_tokens or prompt_logprobs");
  check(max_tokens > 0 || n == 1, "scoring a prompt (max_tokens 0) takes n = 1, got n = {}", n);
  const int64_t total = static_cast<int64_t>(prompt.size()) + max_tokens;
  check(total <= max_model_len,
        "the prompt has {} tokens and max_tokens is {}: together {} exceed the context of {} "
        "tokens; shorten the prompt or lower max_tokens",
        prompt.size(), max_tokens, total, max_model_len);
  sampling.validate(vocab_size);
  check(min_tokens >= 0 && min_tokens <= max_tokens,
        "min_tokens must be in 0…max_tokens ({}), got {}", max_tokens, min_tokens);
  for (int32_t t : allowed_token_ids) {
    check(t >= 0 && t < vocab_size, "allowed token id {} is outside the vocabulary (0…{})", t,
          vocab_size - 1);
  }
  for (const auto& w : bad_words) {
    check(!w.empty(), "a bad word must have at least one token");
    for (int32_t t : w) {
      check(t >= 0 && t < vocab_size, "bad word token id {} is outside the vocabulary (0…{})", t,
            vocab_size - 1);
    }
  }
  check(!constraint || constraint->n_accepted() == 0,
        "a request's grammar must be at its start (no token accepted)");
  check(!constraint || (constraint->mask_width() > 0 && constraint->mask_width() <= vocab_size),
        "the request's grammar covers {} ids; the model's vocabulary has {}",
        constraint ? constraint->mask_width() : 0, vocab_size);
}

}  // namespace detllm::engine
