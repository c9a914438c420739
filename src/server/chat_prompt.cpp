// Chat messages -> prompt text with the model's Jinja template (see chat_prompt.h).
#include "server/chat_prompt.h"

#include <cctype>

#include "core/error.h"
#include "server/api_error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace detllm::server {
namespace {

using ojson = nlohmann::ordered_json;

ojson tool_calls_value(const std::vector<ToolCall>& calls) {
  ojson out = ojson::array();
  for (const ToolCall& c : calls) {
    // vLLM parses the arguments (a JSON text in OpenAI's format) before rendering: templates
    // print them with tojson (Llama 3.1, Qwen) or test `is string` (Qwen); the schema
    // already checked that they parse.
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", ojson::parse(c.arguments)}}}});
  }
  return out;
}

}  // namespace

ChatPrompt::~ChatPrompt() = default;

std::unique_ptr<ChatPrompt> ChatPrompt::from_tokenizer(const Tokenizer& tokenizer) {
  if (tokenizer.chat_template().empty()) return nullptr;
  std::unique_ptr<ChatPrompt> p(new ChatPrompt());
  p->template_ = std::make_unique<ChatTemplate>(ChatTemplate::parse(tokenizer.chat_template()));
  if (auto id = tokenizer.bos_id()) p->bos_token_ = tokenizer.id_to_token(*id);
  if (auto id = tokenizer.eos_id()) p->eos_token_ = tokenizer.id_to_token(*id);
  return p;
}

const std::string& ChatPrompt::source() const {
  return template_->source();
}

namespace {

// transformers' continue_final_message: the rendered text up to the end of the last message's
// content (its last occurrence; the stripped content when the template strips it).
void cut_after_final_message(std::string& text, const std::string& content) {
  auto cut = [&](std::string_view piece) {
    const size_t at = piece.empty() ? std::string::npos : text.rfind(piece);
    if (at == std::string::npos) return false;
    text.resize(at + piece.size());
    return true;
  };
  std::string_view stripped = content;
  while (!stripped.empty() && std::isspace(static_cast<unsigned char>(stripped.front()))) {
    stripped.remove_prefix(1);
  }
  while (!stripped.empty() && std::isspace(static_cast<unsigned char>(stripped.back()))) {
    stripped.remove_suffix(1);
  }
  if (cut(content) || cut(stripped)) return;
  throw ApiError(400,
                 "continue_final_message: the last message's content does not appear in the "
                 "prompt the chat template made of it, so it cannot be continued",
                 "invalid_request_error", "continue_final_message");
}

}  // namespace

std::string ChatPrompt::render(const std::vector<ChatMessageIn>& messages,
                               bool add_generation_prompt, const std::vector<ToolSpec>& tools,
                               const ojson& template_kwargs, bool continue_final_message) const {
  std::vector<ChatMessage> msgs;
  msgs.reserve(messages.size());
  for (const auto& m : messages) {
    ChatMessage c;
    c.role = m.role;
    c.content = m.content;
    c.extra = ojson::object();
    if (!m.name.empty()) c.extra["name"] = m.name;
    if (!m.tool_calls.empty()) c.extra["tool_calls"] = tool_calls_value(m.tool_calls);
    if (!m.tool_call_id.empty()) c.extra["tool_call_id"] = m.tool_call_id;
    msgs.push_back(std::move(c));
  }
  ojson context = template_kwargs.is_object() ? template_kwargs : ojson::object();
  if (!tools.empty()) {
    ojson list = ojson::array();
    for (const ToolSpec& t : tools) list.push_back({{"type", "function"}, {"function", t.function}});
    context["tools"] = std::move(list);
  }
  std::string text;
  try {
    text = template_->render(msgs, add_generation_prompt, bos_token_, eos_token_, context);
  } catch (const Error& e) {
    // The template refused this conversation (raise_exception) or failed on it.
    throw ApiError(400, std::string("the model's chat template cannot format these messages: ") +
                            e.what(),
                   "invalid_request_error", "messages");
  }
  if (continue_final_message) cut_after_final_message(text, messages.back().content);
  return text;
}

}  // namespace detllm::server
