// OpenAI response formatting (see response_format.h).
#include "server/response_format.h"

namespace detllm::server {

using json = nlohmann::json;

json finish_reason_json(const std::optional<engine::FinishReason>& r) {
  if (!r || *r == engine::FinishReason::kNone) return nullptr;
  return std::string(engine::finish_reason_name(*r));
}

json stop_reason_json(const ChoiceState& c) {
  if (c.stop_string) return *c.stop_string;
  if (c.stop_token) return *c.stop_token;
  return nullptr;
}

std::string token_text(const Tokenizer& tokenizer, int32_t id, bool as_id) {
  if (as_id) return "token_id:" + std::to_string(id);
  const int32_t one[1] = {id};
  return tokenizer.decode(one, /*skip_special_tokens=*/false);
}

void CompletionLogprobs::add(int32_t id, std::optional<float> logprob,
                             std::span<const TokenLogprob> top, bool has_top) {
  const std::string text = token_text(tokenizer_, id, as_ids_);
  tokens_.push_back(text);
  token_logprobs_.push_back(logprob ? json(*logprob) : json(nullptr));
  if (has_top) {
    json t = json::object();
    for (const auto& e : top) t[token_text(tokenizer_, e.token, as_ids_)] = e.logprob;
    top_logprobs_.push_back(std::move(t));
  } else {
    top_logprobs_.push_back(nullptr);
  }
  text_offset_.push_back(offset_);
  token_ids_.push_back(id);
  offset_ += text.size();
}

void CompletionLogprobs::add_prompt(std::span<const int32_t> ids,
                                    std::span<const engine::PromptLogprob> lps) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i == 0 || i - 1 >= lps.size()) {
      add(ids[i], std::nullopt, {}, false);
    } else {
      add(ids[i], lps[i - 1].logprob, lps[i - 1].top_logprobs, true);
    }
  }
}

void CompletionLogprobs::add_generated(std::span<const engine::TokenEvent> tokens) {
  for (const auto& t : tokens) add(t.token, t.logprob, t.top_logprobs, true);
}

json CompletionLogprobs::take() {
  json out = {{"tokens", std::move(tokens_)},
              {"token_logprobs", std::move(token_logprobs_)},
              {"top_logprobs", std::move(top_logprobs_)},
              {"text_offset", std::move(text_offset_)},
              {"token_ids", std::move(token_ids_)}};
  tokens_ = json::array();
  token_logprobs_ = json::array();
  top_logprobs_ = json::array();
  text_offset_ = json::array();
  token_ids_ = json::array();
  return out;
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

json chat_logprobs(const Tokenizer& tokenizer, std::span<const engine::TokenEvent> tokens,
                   bool tokens_as_ids) {
  json content = json::array();
  for (const auto& t : tokens) {
    const std::string text = token_text(tokenizer, t.token, tokens_as_ids);
    json top = json::array();
    for (const auto& e : t.top_logprobs) {
      const std::string et = token_text(tokenizer, e.token, tokens_as_ids);
      top.push_back({{"token", et}, {"logprob", e.logprob}, {"bytes", bytes_of(et)},
                     {"token_id", e.token}});
    }
    content.push_back({{"token", text},
                       {"logprob", t.logprob},
                       {"bytes", bytes_of(text)},
                       {"top_logprobs", std::move(top)},
                       {"token_id", t.token}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json prompt_logprobs_json(const Tokenizer& tokenizer, const PromptState& p, bool tokens_as_ids) {
  json out = json::array();
  for (size_t i = 0; i < p.ids.size(); ++i) {
    if (i == 0 || i - 1 >= p.logprobs.size()) {
      out.push_back(nullptr);
      continue;
    }
    const engine::PromptLogprob& lp = p.logprobs[i - 1];
    json entry = json::object();
    auto put = [&](int32_t id, float logprob, int32_t rank) {
      entry[std::to_string(id)] = {{"logprob", logprob},
                                   {"rank", rank},
                                   {"decoded_token", token_text(tokenizer, id, tokens_as_ids)}};
    };
    put(lp.token, lp.logprob, lp.rank);
    for (size_t k = 0; k < lp.top_logprobs.size(); ++k) {
      put(lp.top_logprobs[k].token, lp.top_logprobs[k].logprob, static_cast<int32_t>(k) + 1);
    }
    out.push_back(std::move(entry));
  }
  return out;
}

json usage_json(const Generation& g) {
  const int32_t p = g.prompt_tokens();
  const int32_t c = g.completion_tokens();
  return {{"prompt_tokens", p},
          {"completion_tokens", c},
          {"total_tokens", p + c},
          {"prompt_tokens_details", {{"cached_tokens", g.cached_tokens()}}}};
}

namespace {

json envelope(const ResponseMeta& meta, std::string_view object) {
  return {{"id", meta.id},
          {"object", object},
          {"created", meta.created},
          {"model", meta.model},
          {"system_fingerprint", meta.fingerprint},
          {"seed", meta.seed}};
}

}  // namespace

json chunk_envelope(const ResponseMeta& meta, std::string_view object, json choices) {
  json j = envelope(meta, object);
  j["choices"] = std::move(choices);
  return j;
}

namespace {

// (n_layers × k) ids → [[k ids] per layer].
json per_layer(std::span<const int32_t> ids, int32_t k) {
  json layers = json::array();
  for (size_t i = 0; i + static_cast<size_t>(k) <= ids.size(); i += static_cast<size_t>(k)) {
    layers.push_back(std::vector<int32_t>(ids.begin() + i, ids.begin() + i + k));
  }
  return layers;
}

}  // namespace

json routed_experts_json(std::span<const engine::TokenEvent> tokens, int32_t k) {
  json out = json::array();
  for (const engine::TokenEvent& t : tokens) out.push_back(per_layer(t.routed_experts, k));
  return out;
}

json prompt_routed_experts_json(const PromptState& p, int32_t k) {
  if (p.logprobs.empty()) return nullptr;
  json out = json::array({nullptr});
  for (const engine::PromptLogprob& lp : p.logprobs) out.push_back(per_layer(lp.routed_experts, k));
  return out;
}

namespace {

std::vector<int32_t> output_ids(const ChoiceState& c) {
  std::vector<int32_t> ids;
  ids.reserve(c.tokens.size());
  for (const engine::TokenEvent& t : c.tokens) ids.push_back(t.token);
  return ids;
}

}  // namespace

json completion_response(const ResponseMeta& meta, Generation& g, const Tokenizer& tokenizer,
                         bool echo, bool logprobs) {
  json choices = json::array();
  for (ChoiceState& c : g.choices()) {
    const PromptState& p = g.prompts()[static_cast<size_t>(c.prompt_index)];
    json lp = nullptr;
    if (logprobs) {
      CompletionLogprobs b(tokenizer, 0, meta.tokens_as_ids);
      if (echo) b.add_prompt(p.ids, p.logprobs);
      b.add_generated(c.tokens);
      lp = b.take();
    }
    choices.push_back({{"index", c.index},
                       {"text", echo ? p.text + c.text : c.text},
                       {"logprobs", std::move(lp)},
                       {"finish_reason", finish_reason_json(c.finish)},
                       {"stop_reason", stop_reason_json(c)}});
    if (meta.prompt_logprobs) {
      choices.back()["prompt_logprobs"] = prompt_logprobs_json(tokenizer, p, meta.tokens_as_ids);
    }
    if (meta.token_ids) {
      choices.back()["prompt_token_ids"] = p.ids;
      choices.back()["token_ids"] = output_ids(c);
    }
    if (meta.routed_experts_k > 0) {
      choices.back()["routed_experts"] = routed_experts_json(c.tokens, meta.routed_experts_k);
      if (!p.logprobs.empty()) {
        choices.back()["prompt_routed_experts"] =
            prompt_routed_experts_json(p, meta.routed_experts_k);
      }
    }
  }
  json j = envelope(meta, "text_completion");
  j["choices"] = std::move(choices);
  j["usage"] = usage_json(g);
  return j;
}

json tool_call_json(const ToolCall& call) {
  return {{"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

json chat_finish_reason_json(const std::optional<engine::FinishReason>& r, bool called) {
  if (called && r && (*r == engine::FinishReason::kStop || *r == engine::FinishReason::kLength)) {
    return "tool_calls";
  }
  return finish_reason_json(r);
}

json chat_response(const ResponseMeta& meta, Generation& g, const Tokenizer& tokenizer,
                   bool logprobs, const std::string& echo_text, const ChatOutputConfig& output) {
  json choices = json::array();
  for (ChoiceState& c : g.choices()) {
    ChatOutputConfig config = output;
    config.choice_index = c.index;
    ChatOutputSplitter split(config);
    ChatDelta out = split.push(c.text);
    ChatDelta last = split.finish();
    out.reasoning += last.reasoning;
    out.content += last.content;
    const std::string content = echo_text + out.content;
    json message = {{"role", "assistant"},
                    {"content", content.empty() && (split.called() || split.reasoned())
                                    ? json(nullptr)
                                    : json(content)},
                    {"refusal", nullptr}};
    if (split.called()) {
      json calls = json::array();
      for (const ToolCall& call : last.tool_calls) calls.push_back(tool_call_json(call));
      message["tool_calls"] = std::move(calls);
    }
    if (output.reasoning != ReasoningParserKind::kNone) {
      message["reasoning_content"] = split.reasoned() ? json(out.reasoning) : json(nullptr);
    }
    choices.push_back(
        {{"index", c.index},
         {"message", std::move(message)},
         {"logprobs",
          logprobs ? chat_logprobs(tokenizer, c.tokens, meta.tokens_as_ids) : json(nullptr)},
         {"finish_reason", chat_finish_reason_json(c.finish, split.called())},
         {"stop_reason", stop_reason_json(c)}});
    if (meta.routed_experts_k > 0) {
      choices.back()["routed_experts"] = routed_experts_json(c.tokens, meta.routed_experts_k);
    }
    if (meta.token_ids) choices.back()["token_ids"] = output_ids(c);
  }
  json j = envelope(meta, "chat.completion");
  j["choices"] = std::move(choices);
  if (meta.token_ids) j["prompt_token_ids"] = g.prompts().front().ids;
  if (meta.prompt_logprobs) {
    j["prompt_logprobs"] = prompt_logprobs_json(tokenizer, g.prompts().front(), meta.tokens_as_ids);
    if (meta.routed_experts_k > 0) {
      j["prompt_routed_experts"] =
          prompt_routed_experts_json(g.prompts().front(), meta.routed_experts_k);
    }
  }
  j["usage"] = usage_json(g);
  return j;
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace detllm::server
