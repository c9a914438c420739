// What a user hands the engine (Request) and what comes back through callbacks (token events,
// prompt logprobs, captured logits, finish). Native types only: the server translates the
// OpenAI schema into these and back.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/sampling/sampler.h"
#include "kernels/sampling/sampling_params.h"

namespace detllm::engine {

using RequestId = int64_t;

struct Request {
  std::vector<int32_t> prompt;         // (n_prompt) token ids, at least one
  SamplingParams sampling;             // includes the seed
  int32_t max_tokens = 16;             // new tokens per sample; 0 = score the prompt only
  int32_t n = 1;                       // samples per prompt (separate Philox streams)
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;       // stop strings (needs the engine's tokenizer)
  bool ignore_eos = false;
  std::optional<bool> deterministic;   // unset: the policy's default
  // >= 0: return each prompt token's logprob (and this many top logprobs): scoring / teacher
  // forcing through the same path as generation (design.md V4). -1: off.
  int32_t prompt_logprobs = -1;
  // Conformance / audit: deliver the fp32 logits of every output position via on_logits.
  bool capture_logits = false;

  void validate(int32_t vocab_size, int32_t max_model_len) const;  // throws detllm::Error
};

enum class FinishReason : uint8_t { kNone, kLength, kStop, kAbort };
std::string_view finish_reason_name(FinishReason r);  // "length", "stop", "abort"

struct TokenEvent {
  int32_t sample_index = 0;
  int32_t position = 0;  // absolute position of the new token in its sequence
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
};

// Logprob of prompt token `position` given the tokens before it (position 0 has none).
struct PromptLogprob {
  int32_t position = 0;
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // this sample's generated tokens
  int32_t cached_tokens = 0;      // prompt tokens served from the prefix cache (first admission)
  int32_t preemptions = 0;
};

// A live request as seen from outside (Engine::status).
struct RequestStatus {
  enum class State : uint8_t { kWaiting, kRunning, kUnknown } state = State::kUnknown;
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;  // over all samples
  int32_t cached_tokens = 0;     // prefix-cache hit of the first sample's admission
  int32_t live_samples = 0;
  int32_t preemptions = 0;
};

struct RequestCallbacks {
  std::function<void(const TokenEvent&)> on_token;
  // Once, when the whole prompt has been scored (prompt_logprobs >= 0): (n_prompt - 1) entries.
  std::function<void(std::span<const PromptLogprob>)> on_prompt_logprobs;
  // capture_logits: the logits (vocab) that predict the token at `position` of sample
  // `sample_index` — for generated positions and, when scoring, for prompt positions 1…n-1.
  std::function<void(int32_t sample_index, int32_t position, std::span<const float> logits)>
      on_logits;
  std::function<void(int32_t sample_index, FinishReason reason, const Usage& usage)> on_finish;
};

}  // namespace detllm::engine
