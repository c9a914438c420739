// OpenAI response bodies from a Generation: /v1/completions and /v1/chat/completions, whole
// or as streaming chunks, with logprobs, usage and the reproducibility fields
// (system_fingerprint, seed). Pure formatting: no sockets, no engine calls.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>

#include "engine/request.h"
#include "server/generation.h"
#include "server/tools/chat_output.h"
#include "tokenizer/tokenizer.h"

namespace detllm::server {

// What every response of one request carries.
struct ResponseMeta {
  std::string id;           // "cmpl-…" / "chatcmpl-…"
  int64_t created = 0;      // unix seconds
  std::string model;        // the served model's name
  std::string fingerprint;  // numerics fingerprint (system_fingerprint)
  uint64_t seed = 0;        // the seed used (given or drawn by the server)
  std::string weight_version;  // the weights it ran on (X-Detllm-Weight-Version)
  // vLLM's return_tokens_as_token_ids: logprobs name each token "token_id:N".
  bool tokens_as_ids = false;
  // vLLM's prompt_logprobs: the response carries each prompt token's logprob.
  bool prompt_logprobs = false;
  // vLLM's return_token_ids: prompt_token_ids and token_ids in the response.
  bool token_ids = false;
  // return_routed_experts: the model's experts per token (k), by which the response nests each
  // token's ids into per-layer lists; 0 when not asked for.
  int32_t routed_experts_k = 0;
};

// "stop", "length", "abort"; null while running.
nlohmann::json finish_reason_json(const std::optional<engine::FinishReason>& r);
// vLLM's stop_reason: the stop string or stop token id that ended the choice, else null.
nlohmann::json stop_reason_json(const ChoiceState& c);

// The text of one token as OpenAI shows it in logprobs (decoded alone, special tokens kept), or
// "token_id:N" with as_id (vLLM's return_tokens_as_token_ids).
std::string token_text(const Tokenizer& tokenizer, int32_t id, bool as_id = false);

// vLLM's prompt_logprobs: null for the first token, then for each prompt token a map id ->
// {logprob, rank, decoded_token} holding the token itself and the top alternatives.
nlohmann::json prompt_logprobs_json(const Tokenizer& tokenizer, const PromptState& p,
                                    bool tokens_as_ids);

// return_routed_experts: one entry per token, each a list per layer of its k expert ids (best
// first) — the experts of the token *before* it (engine::TokenEvent::routed_experts).
nlohmann::json routed_experts_json(std::span<const engine::TokenEvent> tokens, int32_t k);
// The prompt's, aligned as prompt_logprobs: null for the first token, then for token i the
// experts of token i − 1; null when the prompt was not scored.
nlohmann::json prompt_routed_experts_json(const PromptState& p, int32_t k);

// Completions "logprobs" object, built token by token: tokens, token_logprobs, top_logprobs,
// text_offset, and the extension token_ids (the ids themselves, to replay or compare exactly).
class CompletionLogprobs {
 public:
  CompletionLogprobs(const Tokenizer& tokenizer, size_t text_offset, bool tokens_as_ids = false)
      : tokenizer_(tokenizer), offset_(text_offset), as_ids_(tokens_as_ids) {}
  // logprob unset: the first prompt token (nothing predicts it) -> null.
  void add(int32_t id, std::optional<float> logprob, std::span<const TokenLogprob> top,
           bool has_top);
  void add_prompt(std::span<const int32_t> ids, std::span<const engine::PromptLogprob> lps);
  void add_generated(std::span<const engine::TokenEvent> tokens);
  nlohmann::json take();
  size_t text_offset() const { return offset_; }

 private:
  const Tokenizer& tokenizer_;
  size_t offset_;
  bool as_ids_;
  nlohmann::json tokens_ = nlohmann::json::array();
  nlohmann::json token_logprobs_ = nlohmann::json::array();
  nlohmann::json top_logprobs_ = nlohmann::json::array();
  nlohmann::json text_offset_ = nlohmann::json::array();
  nlohmann::json token_ids_ = nlohmann::json::array();
};

// Chat "logprobs": {"content": [{token, logprob, bytes, top_logprobs, token_id}]}.
nlohmann::json chat_logprobs(const Tokenizer& tokenizer,
                             std::span<const engine::TokenEvent> tokens,
                             bool tokens_as_ids = false);

nlohmann::json usage_json(const Generation& g);

// Whole responses.
nlohmann::json completion_response(const ResponseMeta& meta, Generation& g,
                                   const Tokenizer& tokenizer, bool echo, bool logprobs);
// echo_text: chat `echo` (as vLLM): the last message's content when it is the assistant's,
// prepended to each choice's content. `output`: the request's reasoning and tool-call parsers
// (chat_output.h; choice_index is set per choice).
nlohmann::json chat_response(const ResponseMeta& meta, Generation& g,
                             const Tokenizer& tokenizer, bool logprobs,
                             const std::string& echo_text = {},
                             const ChatOutputConfig& output = {});

// {"id", "type": "function", "function": {"name", "arguments"}}.
nlohmann::json tool_call_json(const ToolCall& call);
// A chat choice's finish_reason: "tool_calls" when its output held calls and it ended by
// itself (stop or length), else finish_reason_json's.
nlohmann::json chat_finish_reason_json(const std::optional<engine::FinishReason>& r,
                                       bool called);

// A streaming chunk's envelope around `choices` (object "text_completion" or
// "chat.completion.chunk"); usage is added by the caller when needed.
nlohmann::json chunk_envelope(const ResponseMeta& meta, std::string_view object,
                              nlohmann::json choices);

// Serializes; invalid UTF-8 (never produced by the tokenizer, but kept safe) becomes U+FFFD.
std::string dump_json(const nlohmann::json& j);

}  // namespace detllm::server
