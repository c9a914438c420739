// ChatPrompt: OpenAI chat messages -> the prompt text the model was trained on, by rendering
// the model's own Jinja chat template (tokenizer/chat_template.h) with its BOS/EOS strings.
#pragma once

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

  // Throws ApiError 400 when the template refuses the conversation (raise_exception, e.g.
  // roles that do not alternate) or fails on it.
  std::string render(const std::vector<ChatMessageIn>& messages,
                     bool add_generation_prompt) const;

 private:
  ChatPrompt() = default;
  std::unique_ptr<ChatTemplate> template_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace detllm::server
