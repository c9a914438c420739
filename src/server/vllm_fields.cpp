// vLLM request fields (see vllm_fields.h).
#include "server/vllm_fields.h"

#include <limits>

#include "kernels/sampling/sampling_params.h"
#include "server/api_error.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;
constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

std::vector<int32_t> token_id_list(const json& v, const char* param, size_t max_n) {
  if (!v.is_array()) throw_bad_request(param, "'{}' must be a list of token ids", param);
  if (v.size() > max_n) {
    throw_bad_request(param, "'{}' lists {} ids; at most {} are allowed", param, v.size(), max_n);
  }
  std::vector<int32_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer() || v[i].get<int64_t>() < 0 || v[i].get<int64_t>() > kIntMax) {
      throw_bad_request(param, "'{}[{}]' must be a token id (an integer >= 0)", param, i);
    }
    out.push_back(static_cast<int32_t>(v[i].get<int64_t>()));
  }
  return out;
}

}  // namespace

VllmFields parse_vllm_fields(FieldReader& r, const RequestLimits& limits) {
  VllmFields f;
  if (auto m = r.get_int("min_tokens", 0, kIntMax)) f.min_tokens = static_cast<int32_t>(*m);
  if (const json* bw = r.get_raw("bad_words")) {
    if (!bw->is_array() || bw->size() > 256) {
      throw_bad_request("bad_words", "'bad_words' must be a list of at most 256 strings");
    }
    for (size_t i = 0; i < bw->size(); ++i) {
      const json& w = (*bw)[i];
      if (!w.is_string() || w.get<std::string>().empty() ||
          w.get<std::string>().size() > limits.max_string_bytes) {
        throw_bad_request("bad_words", "'bad_words[{}]' must be a non-empty string", i);
      }
      f.bad_words.push_back(w.get<std::string>());
    }
  }
  if (const json* ids = r.get_raw("allowed_token_ids")) {
    f.allowed_token_ids = token_id_list(*ids, "allowed_token_ids", 1u << 20);
    if (f.allowed_token_ids.empty()) {
      throw_bad_request("allowed_token_ids", "'allowed_token_ids' must not be empty");
    }
  }
  f.skip_special_tokens = r.get_bool("skip_special_tokens").value_or(true);
  f.spaces_between_special_tokens = r.get_bool("spaces_between_special_tokens").value_or(true);
  f.include_stop_str_in_output = r.get_bool("include_stop_str_in_output").value_or(false);
  if (auto p = r.get_int("prompt_logprobs", 0, SamplingParams::kMaxLogprobs)) {
    f.prompt_logprobs = static_cast<int32_t>(*p);
  }
  f.return_tokens_as_token_ids = r.get_bool("return_tokens_as_token_ids").value_or(false);
  f.return_token_ids = r.get_bool("return_token_ids").value_or(false);
  if (auto t = r.get_int("truncate_prompt_tokens", -1, kIntMax)) {
    if (*t == 0) {
      throw_bad_request("truncate_prompt_tokens",
                        "'truncate_prompt_tokens' must be >= 1 (or -1: the context's length)");
    }
    f.truncate_prompt_tokens = static_cast<int32_t>(*t);
  }
  if (auto p = r.get_int("priority", std::numeric_limits<int64_t>::min() / 2,
                         std::numeric_limits<int64_t>::max() / 2);
      p && *p != 0) {
    throw_bad_request("priority",
                      "'priority' is only for priority scheduling; this server schedules first "
                      "come, first served (leave it out or send 0)");
  }
  if (r.get_bool("use_beam_search").value_or(false)) {
    throw_bad_request("use_beam_search",
                      "'use_beam_search' is not supported: this server has no beam search "
                      "(sample with n and a seed instead)");
  }
  return f;
}

}  // namespace detllm::server
