// OpenAI request parsing and validation (see openai_schema.h).
#include "server/openai_schema.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/sampling/sampling_params.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/tools/tool_request.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;
constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();

// A JSON array of token ids (non-negative 32-bit integers; the vocabulary is checked later).
std::vector<int32_t> parse_token_ids(const json& v, const std::string& name, size_t max_len) {
  if (v.size() > max_len) {
    throw_bad_request(name, "'{}' has {} token ids; at most {} are accepted", name, v.size(),
                      max_len);
  }
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    if (!t.is_number_integer()) {
      throw_bad_request(name, "'{}[{}]' must be a token id (integer), got {}", name, i,
                        json_type_name(t));
    }
    const bool negative = t.is_number_integer() && !t.is_number_unsigned() && t.get<int64_t>() < 0;
    if (negative || (t.is_number_unsigned() && t.get<uint64_t>() > kMaxTokenId)) {
      throw_bad_request(name, "'{}[{}]' is not a valid token id", name, i);
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

bool is_token_list(const json& v) {
  return v.is_array() && !v.empty() && v[0].is_number();
}

// prompt: "text" | [ids] | ["text", ...] | [[ids], ...]
std::vector<PromptInput> parse_prompts(const json& v, const RequestLimits& limits) {
  const size_t max_ids = 1u << 20;
  std::vector<PromptInput> prompts;
  auto add_text = [&](const json& s, const std::string& name) {
    if (s.get_ref<const std::string&>().size() > limits.max_string_bytes) {
      throw_bad_request(name, "'{}' is longer than {} bytes", name, limits.max_string_bytes);
    }
    prompts.push_back({s.get<std::string>(), {}});
  };
  if (v.is_string()) {
    add_text(v, "prompt");
  } else if (is_token_list(v)) {
    prompts.push_back({std::nullopt, parse_token_ids(v, "prompt", max_ids)});
  } else if (v.is_array()) {
    if (v.empty()) throw_bad_request("prompt", "'prompt' is an empty list: give a prompt");
    if (v.size() > static_cast<size_t>(limits.max_prompts)) {
      throw_bad_request("prompt", "'prompt' has {} prompts; at most {} are accepted", v.size(),
                        limits.max_prompts);
    }
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string name = fmt::format("prompt[{}]", i);
      if (v[i].is_string()) {
        add_text(v[i], name);
      } else if (v[i].is_array()) {
        if (v[i].empty()) throw_bad_request(name, "'{}' is an empty token list", name);
        prompts.push_back({std::nullopt, parse_token_ids(v[i], name, max_ids)});
      } else {
        throw_bad_request(name, "'{}' must be a string or a list of token ids, got {}", name,
                          json_type_name(v[i]));
      }
    }
  } else {
    throw_bad_request("prompt",
                      "'prompt' must be a string, a list of token ids, or a list of either; "
                      "got {}",
                      json_type_name(v));
  }
  return prompts;
}

std::vector<std::string> parse_stop(FieldReader& r, const RequestLimits& limits) {
  const json* v = r.get_raw("stop");
  if (v == nullptr) return {};
  std::vector<std::string> stop;
  auto add = [&](const json& s, const std::string& name) {
    if (!s.is_string()) {
      throw_bad_request(name, "'{}' must be a string, got {}", name, json_type_name(s));
    }
    const auto& str = s.get_ref<const std::string&>();
    if (str.empty()) throw_bad_request(name, "'{}' is an empty stop string", name);
    if (str.size() > 1024) throw_bad_request(name, "'{}' is longer than 1024 bytes", name);
    stop.push_back(str);
  };
  if (v->is_string()) {
    add(*v, "stop");
  } else if (v->is_array()) {
    if (v->size() > static_cast<size_t>(limits.max_stop)) {
      throw_bad_request("stop", "'stop' has {} strings; at most {} are accepted", v->size(),
                        limits.max_stop);
    }
    for (size_t i = 0; i < v->size(); ++i) add((*v)[i], fmt::format("stop[{}]", i));
  } else {
    throw_bad_request("stop", "'stop' must be a string or a list of strings, got {}",
                      json_type_name(*v));
  }
  return stop;
}

// logit_bias: {"token id": bias, ...} (OpenAI: keys are token ids written as decimal strings,
// biases in [-100, 100]). Returned sorted by token id; the vocabulary is checked later.
std::vector<LogitBias> parse_logit_bias(const json& v) {
  if (!v.is_object()) {
    throw_bad_request("logit_bias",
                      "'logit_bias' must be an object mapping token ids (as strings) to biases, "
                      "got {}",
                      json_type_name(v));
  }
  if (v.size() > static_cast<size_t>(SamplingParams::kMaxLogitBias)) {
    throw_bad_request("logit_bias", "'logit_bias' has {} entries; at most {} are accepted",
                      v.size(), SamplingParams::kMaxLogitBias);
  }
  std::vector<LogitBias> out;
  out.reserve(v.size());
  for (const auto& [key, value] : v.items()) {
    int64_t token = 0;
    const bool digits = !key.empty() && key.size() <= 10 &&
                        key.find_first_not_of("0123456789") == std::string::npos;
    if (digits) token = std::stoll(key);
    if (!digits || token > kMaxTokenId) {
      throw_bad_request("logit_bias",
                        "'logit_bias' key \"{}\" is not a token id (a decimal integer "
                        "0…{})",
                        key.substr(0, 32), kMaxTokenId);
    }
    if (!value.is_number() || !std::isfinite(value.get<double>())) {
      throw_bad_request("logit_bias", "'logit_bias[\"{}\"]' must be a number, got {}", key,
                        json_type_name(value));
    }
    const double bias = value.get<double>();
    if (bias < -100.0 || bias > 100.0) {
      throw_bad_request("logit_bias", "'logit_bias[\"{}\"]' must be in [-100, 100], got {}", key,
                        bias);
    }
    out.push_back({static_cast<int32_t>(token), static_cast<float>(bias)});
  }
  std::sort(out.begin(), out.end(),
            [](const LogitBias& a, const LogitBias& b) { return a.token < b.token; });
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].token == out[i - 1].token) {
      throw_bad_request("logit_bias", "'logit_bias' lists token id {} twice", out[i].token);
    }
  }
  return out;
}

// Fields both generation endpoints share (max_tokens and logprobs are endpoint-specific).
GenerationFields parse_common(FieldReader& r, const RequestLimits& limits) {
  GenerationFields g;
  if (auto m = r.get_string("model", 1024)) g.model = *m;
  if (auto t = r.get_float("temperature", 0.0f, 2.0f)) g.temperature = *t;
  if (auto p = r.get_float("top_p", 0.0f, 1.0f, /*lo_open=*/true)) g.top_p = *p;
  if (auto k = r.get_int("top_k", -1, std::numeric_limits<int32_t>::max())) {
    g.top_k = *k < 0 ? 0 : static_cast<int32_t>(*k);
  }
  if (auto m = r.get_float("min_p", 0.0f, 1.0f)) g.min_p = *m;
  g.seed = r.get_uint64("seed");
  if (auto n = r.get_int("n", 1, limits.max_n)) g.n = static_cast<int32_t>(*n);
  g.stop = parse_stop(r, limits);
  if (const json* ids = r.get_raw("stop_token_ids")) {
    if (!ids->is_array()) {
      throw_bad_request("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    }
    g.stop_token_ids = parse_token_ids(*ids, "stop_token_ids", 256);
  }
  g.structured = parse_structured_output(r, limits);
  g.vllm = parse_vllm_fields(r, limits);
  g.stream = r.get_bool("stream").value_or(false);
  if (g.stream && g.vllm.prompt_logprobs) {
    throw_bad_request("prompt_logprobs",
                      "'prompt_logprobs' is returned only in whole responses: send stream: false "
                      "(or score the prompt with echo and logprobs)");
  }
  if (g.stream && g.vllm.return_token_ids) {
    throw_bad_request("return_token_ids",
                      "'return_token_ids' is returned only in whole responses: send stream: "
                      "false (a stream's logprobs with return_tokens_as_token_ids name each id)");
  }
  if (const json* so = r.get_raw("stream_options")) {
    if (!g.stream) {
      throw_bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
    }
    FieldReader s(*so, "stream_options.");
    g.include_usage = s.get_bool("include_usage").value_or(false);
    s.ignore("continuous_usage_stats");
    s.reject_unknown();
  }
  g.deterministic = r.get_bool("deterministic");
  if (auto m = r.get_string("determinism_mode", 32)) {
    try {
      g.determinism_mode = parse_determinism_mode(*m);
    } catch (const detllm::Error& e) {
      throw_bad_request("determinism_mode", "'determinism_mode': {}", e.what());
    }
    if (g.deterministic == false) {
      throw_bad_request("determinism_mode",
                        "'determinism_mode' asks for a deterministic request, but "
                        "'deterministic' is false: drop one of the two");
    }
  }
  g.ignore_eos = r.get_bool("ignore_eos").value_or(false);
  g.return_routed_experts = r.get_bool("return_routed_experts").value_or(false);
  g.speculative = r.get_bool("speculative").value_or(true);
  (void)r.get_string("user", limits.max_string_bytes);  // accepted, unused: but a string, bounded
  if (auto v = r.get_float("presence_penalty", -2.0f, 2.0f)) g.presence_penalty = *v;
  if (auto v = r.get_float("frequency_penalty", -2.0f, 2.0f)) g.frequency_penalty = *v;
  if (auto v = r.get_float("repetition_penalty", 0.0f,
                           static_cast<float>(SamplingParams::kMaxRepetitionPenalty),
                           /*lo_open=*/true)) {
    g.repetition_penalty = *v;  // 1 = off
  }
  if (const json* lb = r.get_raw("logit_bias")) g.logit_bias = parse_logit_bias(*lb);
  return g;
}

void check_max_tokens(std::optional<int64_t> v, const std::string& name,
                      const RequestLimits& limits, std::optional<int32_t>& out) {
  if (!v) return;
  if (*v > limits.max_tokens) {
    throw_bad_request(name, "'{}' is {}; this server allows at most {} (--max-tokens-limit)", name,
                      *v, limits.max_tokens);
  }
  out = static_cast<int32_t>(*v);
}

// chat_template_kwargs (vLLM): an object of template variables, none of those the server sets.
nlohmann::ordered_json parse_chat_template_kwargs(FieldReader& r) {
  const json* kwargs = r.get_raw("chat_template_kwargs");
  if (kwargs == nullptr) return nlohmann::ordered_json::object();
  if (!kwargs->is_object()) {
    throw_bad_request("chat_template_kwargs",
                      "'chat_template_kwargs' must be an object of template variables, got {}",
                      json_type_name(*kwargs));
  }
  for (const auto& item : kwargs->items()) {
    const std::string& key = item.key();
    if (key == "messages" || key == "tools" || key == "add_generation_prompt" ||
        key == "bos_token" || key == "eos_token") {
      throw_bad_request("chat_template_kwargs",
                        "'chat_template_kwargs' may not set '{}': the server sets it from the "
                        "request",
                        key);
    }
  }
  return *kwargs;
}

// The request's tools and chat_template_kwargs in the client's key order: the body parsed once
// more, as ordered JSON (valid, since it just parsed).
void keep_key_order(std::string_view body, std::vector<ToolSpec>& tools,
                    nlohmann::ordered_json& kwargs) {
  if (tools.empty() && kwargs.empty()) return;
  const auto ordered = nlohmann::ordered_json::parse(body);
  if (!tools.empty()) keep_tool_key_order(ordered.at("tools"), tools);
  if (!kwargs.empty()) kwargs = ordered.at("chat_template_kwargs");
}

std::vector<ChatMessageIn> parse_messages(const json& v, const RequestLimits& limits) {
  if (!v.is_array()) {
    throw_bad_request("messages", "'messages' must be a list of messages, got {}",
                      json_type_name(v));
  }
  if (v.empty()) throw_bad_request("messages", "'messages' is empty: give at least one message");
  if (v.size() > static_cast<size_t>(limits.max_messages)) {
    throw_bad_request("messages", "'messages' has {} entries; at most {} are accepted", v.size(),
                      limits.max_messages);
  }
  std::vector<ChatMessageIn> out;
  size_t total_bytes = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string path = fmt::format("messages[{}].", i);
    FieldReader m(v[i], path);
    ChatMessageIn msg;
    const auto role = m.get_string("role", 64);
    if (!role) throw_bad_request(m.name("role"), "'{}' is required", m.name("role"));
    if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant" &&
        *role != "tool") {
      throw_bad_request(m.name("role"),
                        "'{}' is '{}'; expected system, developer, user, assistant or tool",
                        m.name("role"), *role);
    }
    msg.role = *role;
    const json* content = m.get_raw("content");
    const json* tool_calls = m.get_raw("tool_calls");
    if (tool_calls != nullptr) {
      if (msg.role != "assistant") {
        throw_bad_request(m.name("tool_calls"), "'{}' is only allowed in an assistant message",
                          m.name("tool_calls"));
      }
      msg.tool_calls = parse_message_tool_calls(*tool_calls, path);
    }
    if (auto id = m.get_string("tool_call_id", 256)) {
      if (msg.role != "tool") {
        throw_bad_request(m.name("tool_call_id"), "'{}' is only allowed in a tool message",
                          m.name("tool_call_id"));
      }
      msg.tool_call_id = *id;
    } else if (msg.role == "tool") {
      throw_bad_request(m.name("tool_call_id"), "'{}' is required in a tool message",
                        m.name("tool_call_id"));
    }
    if (content == nullptr) {
      if (msg.role != "assistant") {
        throw_bad_request(m.name("content"), "'{}' is required", m.name("content"));
      }
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      // Content parts: only text is supported (this is a text model).
      for (size_t j = 0; j < content->size(); ++j) {
        FieldReader part((*content)[j], fmt::format("{}content[{}].", path, j));
        const auto type = part.get_string("type", 64);
        if (!type || *type != "text") {
          throw_bad_request(part.name("type"),
                            "'{}' must be \"text\": this model takes text content only",
                            part.name("type"));
        }
        const auto text = part.get_string("text", limits.max_string_bytes);
        if (!text) throw_bad_request(part.name("text"), "'{}' is required", part.name("text"));
        msg.content += *text;
        part.reject_unknown();
      }
    } else {
      throw_bad_request(m.name("content"), "'{}' must be a string or a list of text parts, got {}",
                        m.name("content"), json_type_name(*content));
    }
    if (auto name = m.get_string("name", 256)) msg.name = *name;
    m.reject_unknown();
    total_bytes += msg.content.size();
    for (const ToolCall& call : msg.tool_calls) total_bytes += call.arguments.size();
    if (total_bytes > limits.max_string_bytes) {
      throw_bad_request("messages", "the messages hold more than {} bytes of text",
                        limits.max_string_bytes);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

json parse_json_body(std::string_view body) {
  if (body.empty()) {
    throw_bad_request("", "the request body is empty: send a JSON object");
  }
  // JSON has no raw NUL (inside strings it is written \u0000); the parser would take one as
  // the end of the text and accept whatever garbage follows.
  if (const size_t nul = body.find('\0'); nul != std::string_view::npos) {
    throw_bad_request("", "the request body is not valid JSON: a NUL byte at offset {}", nul);
  }
  try {
    return json::parse(body);
  } catch (const json::exception& e) {
    // nlohmann's message names the byte offset and the problem (incl. invalid UTF-8).
    throw_bad_request("", "the request body is not valid JSON: {}", e.what());
  }
}

CompletionRequest parse_completion_body(std::string_view body, const RequestLimits& limits) {
  CompletionRequest c = parse_completion_request(parse_json_body(body), limits);
  keep_schema_key_order(body, c.gen.structured);
  return c;
}

CompletionRequest parse_completion_request(const json& body, const RequestLimits& limits) {
  FieldReader r(body);
  CompletionRequest c;
  c.gen = parse_common(r, limits);
  const json* prompt = r.get_raw("prompt");
  if (prompt == nullptr) throw_bad_request("prompt", "'prompt' is required");
  c.prompts = parse_prompts(*prompt, limits);
  check_max_tokens(r.get_int("max_tokens", 0, std::numeric_limits<int32_t>::max()), "max_tokens",
                   limits, c.gen.max_tokens);
  if (auto lp = r.get_int("logprobs", 0, SamplingParams::kMaxLogprobs)) {
    c.gen.logprobs = static_cast<int32_t>(*lp);
  }
  c.echo = r.get_bool("echo").value_or(false);
  if (auto best_of = r.get_int("best_of", 1, limits.max_n); best_of && *best_of != c.gen.n) {
    throw_bad_request("best_of", "'best_of' is not supported unless it equals n ({})", c.gen.n);
  }
  if (auto suffix = r.get_string("suffix", limits.max_string_bytes); suffix && !suffix->empty()) {
    throw_bad_request("suffix", "'suffix' (insertion) is not supported by this model");
  }
  r.reject_unknown();
  if (c.gen.max_tokens && *c.gen.max_tokens == 0 && !(c.echo && c.gen.logprobs >= 0)) {
    throw_bad_request("max_tokens",
                      "'max_tokens' is 0: that is only allowed to score a prompt "
                      "(set echo: true and logprobs)");
  }
  if (c.gen.max_tokens && *c.gen.max_tokens == 0 && c.gen.n != 1) {
    throw_bad_request("n", "scoring a prompt (max_tokens 0) takes n = 1");
  }
  return c;
}

ChatRequest parse_chat_request(const json& body, const RequestLimits& limits) {
  FieldReader r(body);
  ChatRequest c;
  c.gen = parse_common(r, limits);
  const json* messages = r.get_raw("messages");
  if (messages == nullptr) throw_bad_request("messages", "'messages' is required");
  c.messages = parse_messages(*messages, limits);
  // max_completion_tokens supersedes the deprecated max_tokens.
  check_max_tokens(r.get_int("max_tokens", 1, std::numeric_limits<int32_t>::max()), "max_tokens",
                   limits, c.gen.max_tokens);
  std::optional<int32_t> mct;
  check_max_tokens(r.get_int("max_completion_tokens", 1, std::numeric_limits<int32_t>::max()),
                   "max_completion_tokens", limits, mct);
  if (mct) c.gen.max_tokens = mct;
  const bool logprobs = r.get_bool("logprobs").value_or(false);
  const auto top = r.get_int("top_logprobs", 0, SamplingParams::kMaxLogprobs);
  if (top && !logprobs) {
    throw_bad_request("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
  }
  if (logprobs) c.gen.logprobs = static_cast<int32_t>(top.value_or(0));
  c.add_generation_prompt = r.get_bool("add_generation_prompt").value_or(true);
  c.continue_final_message = r.get_bool("continue_final_message").value_or(false);
  if (c.continue_final_message && c.add_generation_prompt) {
    throw_bad_request("continue_final_message",
                      "'continue_final_message' and 'add_generation_prompt' cannot both be true "
                      "(send add_generation_prompt: false)");
  }
  if (c.continue_final_message && c.messages.back().role != "assistant") {
    throw_bad_request("continue_final_message",
                      "'continue_final_message' continues the last message, which must be the "
                      "assistant's (it is '{}')",
                      c.messages.back().role);
  }
  c.echo = r.get_bool("echo").value_or(false);
  if (const json* tools = r.get_raw("tools")) c.tools = parse_tools(*tools);
  c.tool_choice.kind = c.tools.empty() ? ToolChoice::Kind::kNone : ToolChoice::Kind::kAuto;
  if (const json* choice = r.get_raw("tool_choice")) {
    c.tool_choice = parse_tool_choice(*choice, c.tools);
  }
  c.parallel_tool_calls = r.get_bool("parallel_tool_calls").value_or(true);
  c.chat_template_kwargs = parse_chat_template_kwargs(r);
  r.accept_if_neutral("store", [](const json& v) { return v == false; });
  r.ignore("metadata");
  r.ignore("service_tier");
  r.reject_unknown();
  return c;
}

ChatRequest parse_chat_body(std::string_view body, const RequestLimits& limits) {
  ChatRequest c = parse_chat_request(parse_json_body(body), limits);
  keep_key_order(body, c.tools, c.chat_template_kwargs);
  keep_schema_key_order(body, c.gen.structured);
  return c;
}

TokenizeRequest parse_tokenize_body(std::string_view body, const RequestLimits& limits) {
  TokenizeRequest t = parse_tokenize_request(parse_json_body(body), limits);
  keep_key_order(body, t.tools, t.chat_template_kwargs);
  return t;
}

TokenizeRequest parse_tokenize_request(const json& body, const RequestLimits& limits) {
  FieldReader r(body);
  TokenizeRequest t;
  if (auto m = r.get_string("model", 1024)) t.model = *m;
  t.prompt = r.get_string("prompt", limits.max_string_bytes);
  if (const json* messages = r.get_raw("messages")) t.messages = parse_messages(*messages, limits);
  if (t.prompt.has_value() == !t.messages.empty()) {
    throw_bad_request("prompt", "give exactly one of 'prompt' (a string) and 'messages'");
  }
  t.add_special_tokens = r.get_bool("add_special_tokens").value_or(true);
  t.add_generation_prompt = r.get_bool("add_generation_prompt").value_or(true);
  if (const json* tools = r.get_raw("tools")) t.tools = parse_tools(*tools);
  t.chat_template_kwargs = parse_chat_template_kwargs(r);
  if (t.prompt && (!t.tools.empty() || !t.chat_template_kwargs.empty())) {
    throw_bad_request(t.tools.empty() ? "chat_template_kwargs" : "tools",
                      "'{}' is for 'messages' (the chat template), not for a 'prompt'",
                      t.tools.empty() ? "chat_template_kwargs" : "tools");
  }
  r.reject_unknown();
  return t;
}

DetokenizeRequest parse_detokenize_request(const json& body, const RequestLimits& limits) {
  (void)limits;
  FieldReader r(body);
  DetokenizeRequest d;
  if (auto m = r.get_string("model", 1024)) d.model = *m;
  const json* tokens = r.get_raw("tokens");
  if (tokens == nullptr || !tokens->is_array()) {
    throw_bad_request("tokens", "'tokens' is required: a list of token ids");
  }
  d.tokens = parse_token_ids(*tokens, "tokens", 1u << 20);
  r.reject_unknown();
  return d;
}

}  // namespace detllm::server
