// Reasoning parsers (vLLM's --reasoning-parser): split a thinking model's output into the
// reasoning (message.reasoning_content) and the answer (message.content), whole or as a
// stream, holding back only text that may be the start of a <think> / </think> tag.
//
//   deepseek_r1  the output is reasoning from its start (a leading <think> is dropped; the
//                template may have put it in the prompt) up to </think>; without </think> it
//                is all reasoning (the model was cut while thinking)
//   qwen3        reasoning only when the output starts with <think> (after whitespace), up
//                to </think> or the end; otherwise it is all content (thinking disabled, e.g.
//                chat_template_kwargs {"enable_thinking": false})
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace detllm::server {

enum class ReasoningParserKind : uint8_t { kNone, kDeepSeekR1, kQwen3 };

// "deepseek_r1", "qwen3", "none"; nullopt for another name.
std::optional<ReasoningParserKind> reasoning_parser_from_name(std::string_view name);
// "<think>" and "</think>" (none for kNone): kept in the output where they are special tokens.
std::vector<std::string_view> reasoning_parser_markers(ReasoningParserKind kind);

struct ReasoningPiece {
  std::string reasoning;
  std::string content;
};

class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(ReasoningParserKind kind = ReasoningParserKind::kNone)
      : kind_(kind), state_(kind == ReasoningParserKind::kNone ? State::kContent : State::kStart) {}
  // The next piece of output -> what can be released now.
  ReasoningPiece push(std::string_view text);
  // The end of the output: whatever was held.
  ReasoningPiece finish();

 private:
  enum class State : uint8_t { kStart, kReasoning, kContent };
  void reason(ReasoningPiece& out);  // state kReasoning: release held_ up to a possible tag

  ReasoningParserKind kind_;
  State state_;
  std::string held_;
};

}  // namespace detllm::server
