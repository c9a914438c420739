// From validated OpenAI fields to engine::Requests: model name check (404), prompt checks
// against the vocabulary, the prompt limit and the context (clear 400s), max_tokens defaults,
// the seed (given or drawn) and the response metadata (id, fingerprint). Shared by the
// completions and chat handlers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/openai_schema.h"
#include "server/response_format.h"
#include "server/server_context.h"

namespace detllm::server {

// 404 model_not_found unless `requested` is "" or one of the served names.
void check_model(const ServerContext& ctx, const std::string& requested);
// 400 naming `param` when an id is outside the vocabulary, the prompt is empty, longer than
// --max-prompt-tokens, or leaves no room in the context.
void check_prompt(const ServerContext& ctx, const std::vector<int32_t>& ids,
                  const std::string& param);
// vLLM's truncate_prompt_tokens: keeps the last k prompt tokens (-1: the last max_model_len - 1,
// leaving one position for output); nothing when the field is absent or the prompt is shorter.
void truncate_prompt(const ServerContext& ctx, const GenerationFields& gen,
                     std::vector<int32_t>& ids);
// max_tokens given, else `fallback` (0 = "as many as fit", capped by --max-tokens-limit);
// 400 when prompt + max_tokens exceed the context.
int32_t resolve_max_tokens(const ServerContext& ctx, const GenerationFields& gen,
                           size_t longest_prompt, int32_t fallback);

struct BuiltRequests {
  std::vector<engine::Request> requests;
  uint64_t seed = 0;
  bool deterministic = true;
  std::string model;  // the name the request used (one of the served names), for the response
};

// Chat with a reasoning parser (vLLM's structured outputs on thinking models): each request's
// grammar starts after the reasoning — after the first ctx.reasoning_end_ids in its output
// (structured/after_reasoning.h); with qwen3 the reasoning is optional, and an output that does
// not open with `<think>` is under the grammar from its first token. Unchanged when the prompt
// ends with the end marker (the template closed the reasoning: Qwen3 with enable_thinking
// false), and without a parser or a grammar.
void start_grammar_after_reasoning(const ServerContext& ctx, BuiltRequests& built);

// One engine request per prompt, sharing the sampling settings and the seed.
BuiltRequests build_requests(ServerContext& ctx, const GenerationFields& gen,
                             const std::vector<std::vector<int32_t>>& prompts,
                             int32_t max_tokens, int32_t prompt_logprobs);

ResponseMeta make_meta(const ServerContext& ctx, std::string_view id_prefix,
                       const BuiltRequests& built);

// Headers every generation response carries: X-Detllm-Seed, X-Detllm-Fingerprint,
// X-Request-Id.
std::vector<std::pair<std::string, std::string>> generation_headers(const ResponseMeta& meta);

int64_t unix_now();

}  // namespace detllm::server
