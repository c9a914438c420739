// Chat templates (see chat_template.h): builds the render context exactly as transformers'
// apply_chat_template does (message normalization, reasoning-field aliases, special tokens)
// and runs the Jinja interpreter on it.
#include "tokenizer/chat_template.h"

#include <algorithm>

#include "core/error.h"

namespace detllm {
namespace {

using jinja::Dict;
using jinja::Value;

// One message as transformers hands it to the template: role, content, the extra fields with
// None values dropped, then the reasoning aliases of _alias_reasoning_fields (transformers
// 5.x): when any of reasoning_content / thinking / reasoning is set, `thinking` is filled in
// front and `reasoning_content` is set to that first reasoning value.
Value message_value(const ChatMessage& m) {
  Dict d;
  d.set(Value::string("role"), Value::string(m.role));
  d.set(Value::string("content"), Value::string(m.content));
  if (!m.extra.is_null()) {
    check(m.extra.is_object(), "chat message extra fields must be a JSON object, got {}",
          m.extra.type_name());
    std::vector<std::string> dropped;
    for (auto it = m.extra.begin(); it != m.extra.end(); ++it) {
      if (it.value().is_null()) {
        dropped.push_back(it.key());
      } else {
        d.set(Value::string(it.key()), Value::from_json(it.value()));
      }
    }
    if (!dropped.empty()) {
      Dict kept;
      for (const auto& [key, value] : d.items()) {
        if (std::find(dropped.begin(), dropped.end(), key.as_string()) == dropped.end()) {
          kept.set(key, value);
        }
      }
      d = std::move(kept);
    }
  }
  static constexpr const char* kReasoningFields[] = {"reasoning_content", "thinking", "reasoning"};
  const Value* reasoning = nullptr;
  for (const char* field : kReasoningFields) {
    const Value* v = d.find(std::string_view(field));
    if (v && !v->is_none()) {
      reasoning = v;
      break;
    }
  }
  if (reasoning) {
    const Value r = *reasoning;
    Dict aliased;
    aliased.set(Value::string("thinking"), r);
    for (const auto& [key, value] : d.items()) aliased.set(key, value);
    aliased.set(Value::string("reasoning_content"), r);
    d = std::move(aliased);
  }
  return Value::dict(std::move(d));
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string_view source, const jinja::RenderLimits& limits) {
  ChatTemplate t;
  t.template_ = jinja::Template::parse(source, limits);
  return t;
}

const std::string& ChatTemplate::source() const {
  return template_.source();
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, const std::string& bos_token,
                                 const std::string& eos_token,
                                 const nlohmann::ordered_json& extra_context) const {
  check(extra_context.is_object() || extra_context.is_null(),
        "chat template extra_context must be a JSON object, got {}", extra_context.type_name());
  jinja::List list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) list.push_back(message_value(m));
  Dict context;
  context.set(Value::string("messages"), Value::list(std::move(list)));
  context.set(Value::string("tools"), Value::none());
  context.set(Value::string("documents"), Value::none());
  context.set(Value::string("add_generation_prompt"), Value::boolean(add_generation_prompt));
  if (!bos_token.empty()) context.set(Value::string("bos_token"), Value::string(bos_token));
  if (!eos_token.empty()) context.set(Value::string("eos_token"), Value::string(eos_token));
  if (extra_context.is_object()) {
    for (auto it = extra_context.begin(); it != extra_context.end(); ++it) {
      check(it.key() != "messages" && it.key() != "add_generation_prompt",
            "chat template extra_context may not set '{}': pass it as the render() argument",
            it.key());
      context.set(Value::string(it.key()), Value::from_json(it.value()));
    }
  }
  return template_.render(context);
}

std::string ChatTemplate::render_context(const nlohmann::ordered_json& context) const {
  return template_.render(context);
}

}  // namespace detllm
