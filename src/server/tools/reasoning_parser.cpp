// <think> ... </think> splitting (see reasoning_parser.h).
#include "server/tools/reasoning_parser.h"

#include "server/tools/text_scan.h"

namespace detllm::server {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

}  // namespace

std::optional<ReasoningParserKind> reasoning_parser_from_name(std::string_view name) {
  if (name == "none") return ReasoningParserKind::kNone;
  if (name == "deepseek_r1") return ReasoningParserKind::kDeepSeekR1;
  if (name == "qwen3") return ReasoningParserKind::kQwen3;
  return std::nullopt;
}

std::vector<std::string_view> reasoning_parser_markers(ReasoningParserKind kind) {
  if (kind == ReasoningParserKind::kNone) return {};
  return {kThinkOpen, kThinkClose};
}

void ReasoningSplitter::reason(ReasoningPiece& out) {
  if (const size_t end = held_.find(kThinkClose); end != std::string::npos) {
    out.reasoning += held_.substr(0, end);
    out.content += held_.substr(end + kThinkClose.size());
    held_.clear();
    state_ = State::kContent;
    return;
  }
  const size_t keep = partial_marker_len(held_, kThinkClose);
  out.reasoning += held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
}

ReasoningPiece ReasoningSplitter::push(std::string_view text) {
  ReasoningPiece out;
  if (state_ == State::kContent) {
    out.content = std::string(text);
    return out;
  }
  held_ += text;
  if (state_ == State::kStart) {
    const size_t p = skip_json_space(held_, 0);
    const std::string_view rest = std::string_view(held_).substr(p);
    if (rest.starts_with(kThinkOpen)) {
      held_.erase(0, p + kThinkOpen.size());
      state_ = State::kReasoning;
    } else if (kThinkOpen.starts_with(rest)) {
      return out;  // whitespace, or a <think> that may be arriving
    } else if (kind_ == ReasoningParserKind::kQwen3) {
      state_ = State::kContent;
      out.content = std::move(held_);
      held_.clear();
      return out;
    } else {
      state_ = State::kReasoning;  // deepseek_r1: <think> was in the prompt
    }
  }
  reason(out);
  return out;
}

ReasoningPiece ReasoningSplitter::finish() {
  ReasoningPiece out;
  if (state_ == State::kStart && kind_ == ReasoningParserKind::kQwen3) {
    out.content = std::move(held_);
  } else {
    out.reasoning = std::move(held_);
  }
  held_.clear();
  state_ = State::kContent;
  return out;
}

}  // namespace detllm::server
