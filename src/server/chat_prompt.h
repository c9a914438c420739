// ChatPrompt: OpenAI chat messages -> the prompt text the model was trained on, by rendering
// the model's own Jinja chat template (tokenizer/chat_template.h) with its BOS/EOS strings,
// the request's tools and its chat_template_kwargs.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "server/openai_schema.h"

namespace detllm {
class ChatTemplate;
class Tokenizer;
}  // namespace detllm

namespace detllm::server {

class ChatPrompt {
 public:
  // Parses tokenizer.chat_template(); throws detllm::Error when it does not parse. Returns
  // nullptr when the tokenizer has no template.
  static std::unique_ptr<ChatPrompt> from_tokenizer(const Tokenizer& tokenizer);
  ~ChatPrompt();

  // Renders as vLLM does: `tools` as a list of {"type": "function", "function": {...}}
  // (undefined-as-none when empty); an assistant message's tool_calls as {"id", "type",
  // "function": {"name", "arguments"}} with arguments parsed from their JSON text into a
  // value (templates print them with tojson); a tool message's tool_call_id; every key of
  // `template_kwargs` as a template variable. Throws ApiError 400 when the template refuses
  // the conversation (raise_exception, e.g. roles that do not alternate) or fails on it.
  // continue_final_message: the text is cut right after the last message's content (as
  // transformers' apply_chat_template does), so the model continues that message; 400 when
  // the rendered text does not contain it.
  std::string render(const std::vector<ChatMessageIn>& messages, bool add_generation_prompt,
                     const std::vector<ToolSpec>& tools = {},
                     const nlohmann::ordered_json& template_kwargs =
                         nlohmann::ordered_json::object(),
                     bool continue_final_message = false) const;

  const std::string& source() const;  // the template's Jinja source (normalized)

 private:
  ChatPrompt() = default;
  std::unique_ptr<ChatTemplate> template_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace detllm::server
