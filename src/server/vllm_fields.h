// vLLM's sampling and output fields of a generation request (docs/server.md, "vLLM request
// fields"), parsed with vLLM's names, ranges and defaults, so a client written for vLLM runs
// unchanged. Both endpoints take them (through the openai client's extra_body).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/json_fields.h"
#include "server/server_options.h"

namespace detllm::server {

struct VllmFields {
  int32_t min_tokens = 0;                   // eos / stop ids masked and stop strings off until then
  std::vector<std::string> bad_words;       // words the output never completes
  std::vector<int32_t> allowed_token_ids;   // non-empty: only these ids are drawn
  bool skip_special_tokens = true;          // output text without special tokens
  bool spaces_between_special_tokens = true;  // accepted; no effect with this detokenizer
  bool include_stop_str_in_output = false;  // keep the matched stop string in the text
  std::optional<int32_t> prompt_logprobs;   // prompt tokens' logprobs (+ this many top ones)
  bool return_tokens_as_token_ids = false;  // logprobs name tokens "token_id:N"
  // Each choice carries token_ids (its output ids) and the prompt's ids (prompt_token_ids: in
  // each completion choice, at the top of a chat response), as vLLM's; whole responses only.
  bool return_token_ids = false;
  // Keep only the last k prompt tokens (k >= 1); -1: the last max_model_len - 1 tokens.
  std::optional<int32_t> truncate_prompt_tokens;
};

// Reads (and marks as seen) min_tokens, bad_words, allowed_token_ids, skip_special_tokens,
// spaces_between_special_tokens, include_stop_str_in_output, prompt_logprobs,
// return_tokens_as_token_ids, return_token_ids, truncate_prompt_tokens, priority and
// use_beam_search. Throws ApiError 400 naming the field on a bad value; `priority` other than 0 is
// a 400 (this server schedules first come, first served, as vLLM's default scheduler, which refuses
// it too), and so is `use_beam_search: true` (no beam search here).
VllmFields parse_vllm_fields(FieldReader& r, const RequestLimits& limits);

}  // namespace detllm::server
