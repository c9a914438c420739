// What a user hands the engine (Request) and what comes back through callbacks (token events,
// prompt logprobs, captured logits, finish). Native types only: the server translates the
// OpenAI schema into these and back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/sampling/sampler.h"
#include "kernels/sampling/sampling_params.h"
#include "structured/token_constraint.h"

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
  // vLLM's token rules, each a mask on the draw (like the grammar's: the token is drawn from
  // the ids left, the reported logprobs stay the model's):
  //   min_tokens         until this many tokens are generated, eos and stop_token_ids are
  //                      masked and stop strings are not checked;
  //   allowed_token_ids  non-empty: only these ids may be drawn;
  //   bad_words          token sequences (each tokenized bad word) the output never completes:
  //                      the last id of one is masked where the generated tokens end with the
  //                      rest of it (a one-token word is masked everywhere).
  int32_t min_tokens = 0;
  std::vector<int32_t> allowed_token_ids;
  std::vector<std::vector<int32_t>> bad_words;
  std::optional<bool> deterministic;   // unset: the policy's default
  // false: no speculative decoding for this request even when the engine has it on
  // (EngineConfig::speculative). Either way the output is the same bits.
  bool speculation = true;
  // >= 0: return each prompt token's logprob (and this many top logprobs): scoring / teacher
  // forcing through the same path as generation (design.md V4). -1: off.
  int32_t prompt_logprobs = -1;
  // Conformance / audit: deliver the fp32 logits of every output position via on_logits.
  bool capture_logits = false;
  // Mixture-of-experts models: return the experts each token was routed to (routing replay in
  // RL training) in TokenEvent::routed_experts and, with prompt_logprobs, in
  // PromptLogprob::routed_experts. Off by default: it costs n_layers × k ints a token. A model
  // without experts refuses it (Engine::add_request).
  bool return_routed_experts = false;
  // Structured output: the grammar every generated token must match, at its start (nothing
  // accepted). Each sample draws under the bitmask of its own generated prefix
  // (kernels/sampling/masked_sample.h; logprobs stay the model's); a position where the grammar
  // allows no token ends the sample with kGrammar. Shared: the engine forks it per sample.
  std::shared_ptr<const structured::TokenConstraint> constraint;

  void validate(int32_t vocab_size, int32_t max_model_len) const;  // throws detllm::Error
};

// kGrammar: the request's grammar allowed no token at the next position (a grammar that
// cannot go on, or one already complete when eos is ignored).
enum class FinishReason : uint8_t { kNone, kLength, kStop, kAbort, kGrammar };
std::string_view finish_reason_name(FinishReason r);  // "length", "stop", "abort", "grammar"

// Routed experts (Request::return_routed_experts) ride with the logprobs, on the token their
// forward row predicts: the entry of the token at position p holds the experts the token at
// p − 1 was routed to — the row whose logits gave p's logprob. (n_layers × k) int32, layer
// by layer, each layer's k ids best first (ties to the lower index, docs/models.md). So prompt
// entries (positions 1…n−1) and generated ones cover every token the model read, 0 … end − 1;
// the last generated token is never read, as in vLLM's and SGLang's [0, seq_len − 1). Empty
// when not asked for.
struct TokenEvent {
  int32_t sample_index = 0;
  int32_t position = 0;  // absolute position of the new token in its sequence
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
  std::vector<int32_t> routed_experts;  // (n_layers, k) of the token at position − 1
};

// Logprob of prompt token `position` given the tokens before it (position 0 has none).
struct PromptLogprob {
  int32_t position = 0;
  int32_t token = 0;
  float logprob = 0.0f;
  int32_t rank = 0;  // 1 + the ids with a higher logit (vLLM's rank: 1 = the most likely)
  std::vector<TokenLogprob> top_logprobs;
  std::vector<int32_t> routed_experts;  // (n_layers, k) of the token at position − 1
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
  // `sample_index` — for generated positions and, when scoring, for prompt positions 1…n-1 (not
  // for a position where the request's token rules allowed no token: it has none).
  std::function<void(int32_t sample_index, int32_t position, std::span<const float> logits)>
      on_logits;
  std::function<void(int32_t sample_index, FinishReason reason, const Usage& usage)> on_finish;
};

}  // namespace detllm::engine
