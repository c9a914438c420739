// Chat messages -> prompt text with the model's Jinja template (see chat_prompt.h).
#include "server/chat_prompt.h"

#include "core/error.h"
#include "server/api_error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace detllm::server {

ChatPrompt::~ChatPrompt() = default;

std::unique_ptr<ChatPrompt> ChatPrompt::from_tokenizer(const Tokenizer& tokenizer) {
  if (tokenizer.chat_template().empty()) return nullptr;
  std::unique_ptr<ChatPrompt> p(new ChatPrompt());
  p->template_ = std::make_unique<ChatTemplate>(ChatTemplate::parse(tokenizer.chat_template()));
  if (auto id = tokenizer.bos_id()) p->bos_token_ = tokenizer.id_to_token(*id);
  if (auto id = tokenizer.eos_id()) p->eos_token_ = tokenizer.id_to_token(*id);
  return p;
}

std::string ChatPrompt::render(const std::vector<ChatMessageIn>& messages,
                               bool add_generation_prompt) const {
  std::vector<ChatMessage> msgs;
  msgs.reserve(messages.size());
  for (const auto& m : messages) {
    ChatMessage c;
    c.role = m.role;
    c.content = m.content;
    c.extra = nlohmann::json::object();
    if (!m.name.empty()) c.extra["name"] = m.name;
    msgs.push_back(std::move(c));
  }
  try {
    return template_->render(msgs, add_generation_prompt, bos_token_, eos_token_);
  } catch (const Error& e) {
    // The template refused this conversation (raise_exception) or failed on it.
    throw ApiError(400, std::string("the model's chat template cannot format these messages: ") +
                            e.what(),
                   "invalid_request_error", "messages");
  }
}

}  // namespace detllm::server
