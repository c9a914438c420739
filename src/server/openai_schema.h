// The OpenAI request schema, parsed and validated into native structs: /v1/completions,
// /v1/chat/completions, /tokenize and /detokenize bodies. No model or engine here — checks
// that need the vocabulary or context (token ids, prompt length) happen in the handlers.
// Unknown fields are refused with a 400 naming them (as OpenAI's own API does); OpenAI fields
// this server does not implement are accepted only at their neutral value.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "determinism/policy.h"
#include "kernels/sampling/logit_penalties.h"
#include "server/server_options.h"
#include "server/structured_fields.h"
#include "server/vllm_fields.h"
#include "server/tools/tool_spec.h"

namespace detllm::server {

// One prompt: text, or token ids (exactly one of the two).
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> ids;  // when text is unset
};

struct ChatMessageIn {
  std::string role;     // system, developer, user, assistant, tool
  std::string content;  // text (content parts joined); "" when null (an assistant's tool calls)
  std::string name;     // optional participant name ("" = none)
  std::vector<ToolCall> tool_calls;  // assistant: the calls it made
  std::string tool_call_id;          // tool: the call this message answers
};

// Fields shared by both generation endpoints, normalized.
struct GenerationFields {
  std::string model;                  // "" = not given (the served model)
  std::optional<int32_t> max_tokens;  // unset: the endpoint's default
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;  // 0 = off (-1 is accepted and means off too)
  float min_p = 0.0f;
  std::optional<uint64_t> seed;  // unset: the server draws one and returns it
  int32_t n = 1;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;  // extension (as vLLM)
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  std::optional<bool> deterministic;  // extension: unset = the server's default
  // Extension: the determinism mode the caller requires (docs/modes.md); the server runs one
  // (detllm serve --mode) and refuses a request that asks for another. Implies deterministic.
  std::optional<DeterminismMode> determinism_mode;
  bool ignore_eos = false;  // extension (as vLLM)
  int32_t logprobs = -1;    // top logprobs per token; -1 = no logprobs at all
  // Extension: false turns the server's speculative decoding (detllm serve
  // --speculative-method) off for this request; the output is the same bits either way.
  bool speculative = true;
  // Logit penalties (kernels/sampling/logit_penalties.h); the neutral values are off.
  float presence_penalty = 0.0f;      // [-2, 2] (OpenAI)
  float frequency_penalty = 0.0f;     // [-2, 2] (OpenAI)
  float repetition_penalty = 1.0f;    // (0, 100] (vLLM, transformers)
  std::vector<LogitBias> logit_bias;  // ascending token ids (the vocabulary is checked later)
  // response_format / structured_outputs / guided_*: the grammar the output must match.
  std::optional<StructuredOutput> structured;
  VllmFields vllm;  // min_tokens, bad_words, skip_special_tokens, prompt_logprobs, ...

  // Extension (mixture-of-experts models): each token's routed experts in the response.
  bool return_routed_experts = false;
};

struct CompletionRequest {
  GenerationFields gen;
  std::vector<PromptInput> prompts;  // (n_prompts) >= 1
  bool echo = false;
};

struct ChatRequest {
  GenerationFields gen;
  std::vector<ChatMessageIn> messages;  // >= 1
  bool add_generation_prompt = true;    // extension (as vLLM)
  // Extension (as vLLM, transformers): the reply continues the last (assistant) message: the
  // prompt ends right after its content, without the template's end-of-turn tokens.
  bool continue_final_message = false;
  bool echo = false;                    // extension (as vLLM): see chat_response
  std::vector<ToolSpec> tools;          // function tools offered to the model
  ToolChoice tool_choice;               // default: auto with tools, none without
  bool parallel_tool_calls = true;
  // Extension (as vLLM): extra variables for the chat template, e.g. {"enable_thinking": false}.
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  // True when the output goes through the tool-call parser: tools given, tool_choice not none.
  bool parses_tool_calls() const {
    return !tools.empty() && tool_choice.kind != ToolChoice::Kind::kNone;
  }
};

struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;    // either a prompt ...
  std::vector<ChatMessageIn> messages;  // ... or chat messages rendered with the template
  bool add_special_tokens = true;       // for `prompt`
  bool add_generation_prompt = true;    // for `messages`
  std::vector<ToolSpec> tools;          // for `messages`: rendered as the chat endpoint does
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// Parses a request body; malformed JSON (including invalid UTF-8 in strings) is a 400 whose
// message says where parsing stopped.
nlohmann::json parse_json_body(std::string_view body);

CompletionRequest parse_completion_request(const nlohmann::json& body, const RequestLimits& limits);
// The body as text: parse_json_body, parse_completion_request, then the JSON schema's key
// order restored (keep_schema_key_order).
CompletionRequest parse_completion_body(std::string_view body, const RequestLimits& limits);
ChatRequest parse_chat_request(const nlohmann::json& body, const RequestLimits& limits);

// parse_json_body + parse_chat_request, keeping the client's key order where the chat template
// prints request data (each tool's function object, chat_template_kwargs) and in a JSON schema.
ChatRequest parse_chat_body(std::string_view body, const RequestLimits& limits);
// parse_json_body + parse_tokenize_request, with the same key order kept.
TokenizeRequest parse_tokenize_body(std::string_view body, const RequestLimits& limits);
TokenizeRequest parse_tokenize_request(const nlohmann::json& body, const RequestLimits& limits);
DetokenizeRequest parse_detokenize_request(const nlohmann::json& body, const RequestLimits& limits);

}  // namespace detllm::server
