// libFuzzer target for the chat template interpreter: parse arbitrary bytes as a Jinja template,
// then render it over a typical conversation under tight limits. Any outcome but success or
// detllm::Error (a crash, a hang, a sanitizer report, another exception type) is a bug.
// Build and run: scripts/fuzz.sh 60 chat_template_fuzz
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace {

const std::vector<detllm::ChatMessage>& conversation() {
  static const std::vector<detllm::ChatMessage> messages = {
      {"system", "You are helpful.", {}},
      {"user", "Hi {{ there }} <think>x</think>", nlohmann::json{{"name", "bob"}}},
      {"assistant", "Calling.",
       nlohmann::json{{"tool_calls", {{{"function", {{"name", "f"}, {"arguments", {{"a", 1}}}}}}}},
                      {"reasoning_content", "why"}}},
      {"tool", "42", {}},
      {"user", "Thanks\n", {}},
  };
  return messages;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  detllm::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_steps = 100'000;
  limits.max_range = 1000;
  try {
    const detllm::ChatTemplate tpl = detllm::ChatTemplate::parse(source, limits);
    const nlohmann::json extra = {
        {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
        {"enable_thinking", false}};
    (void)tpl.render(conversation(), true, "<s>", "</s>", extra);
    (void)tpl.render({}, false, "", "");
  } catch (const detllm::Error&) {
  }
  return 0;
}
