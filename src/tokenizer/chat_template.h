// Chat templates: turn a conversation into the prompt text a model was trained on by running
// the model's own Jinja template, byte for byte as Hugging Face transformers'
// apply_chat_template(tokenize=False) does (jinja2 with trim_blocks and lstrip_blocks).
//
// The interpreter is the Jinja library (detllm_jinja, jinja/jinja.h: what it covers and what it
// refuses). A parsed ChatTemplate is immutable; render() is const and thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "jinja/jinja.h"

namespace detllm {

struct ChatMessage {
  std::string role;
  std::string content;
  // Further message fields (name, tool_calls, reasoning_content...), passed to the template as
  // message attributes after role and content, in this json's key order. Null fields are
  // dropped (as transformers drops None); "role" or "content" here replace the fields above
  // (e.g. content given as a list of parts). Ordered: a template may print a field with tojson.
  nlohmann::ordered_json extra;
};

class ChatTemplate {
 public:
  // Throws detllm::Error with line and column on syntax errors, unknown filters/tests and
  // unsupported tags (include, extends, import, call).
  static ChatTemplate parse(std::string_view source,
                            const jinja::RenderLimits& limits = jinja::RenderLimits{});

  // Renders with the variables transformers passes: messages (list of dicts), tools = none,
  // documents = none, add_generation_prompt, bos_token and eos_token (left undefined when
  // empty, as transformers omits missing special tokens), then every key of extra_context
  // (e.g. tools, enable_thinking), which may override tools and documents. Throws
  // detllm::Error naming line and column when the template fails or calls raise_exception.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::string& bos_token, const std::string& eos_token,
                     const nlohmann::ordered_json& extra_context =
                         nlohmann::ordered_json::object()) const;

  // Renders with exactly the variables of `context` (a JSON object; key order is kept, which
  // matters for `tojson` and for iterating dicts).
  std::string render_context(const nlohmann::ordered_json& context) const;

  const std::string& source() const;  // normalized (newlines as \n, no trailing newline)

 private:
  jinja::Template template_;
};

}  // namespace detllm
