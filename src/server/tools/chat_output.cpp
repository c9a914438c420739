// Splitting a chat choice's output into reasoning, content and tool calls (see chat_output.h).
#include "server/tools/chat_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>

#include "core/hash.h"
#include "server/tools/tool_call_schema.h"

namespace detllm::server {

ChatOutputSplitter::ChatOutputSplitter(const ChatOutputConfig& config)
    : config_(config),
      reasoning_(config.reasoning),
      tool_state_(config.constrained_calls              ? ToolState::kHeld
                  : config.tools == ToolParserKind::kNone ? ToolState::kPassThrough
                                                          : ToolState::kScanning) {}

void ChatOutputSplitter::content(std::string_view piece, ChatDelta& out) {
  if (tool_state_ == ToolState::kPassThrough) {
    out.content += piece;
    return;
  }
  text_ += piece;
  if (tool_state_ == ToolState::kHeld) return;
  const SectionStart s = find_section_start(config_.tools, text_, scanned_);
  if (s.pos == std::string_view::npos) {
    tool_state_ = ToolState::kPassThrough;
    out.content += text_.substr(released_);
    released_ = text_.size();
    return;
  }
  out.content += text_.substr(released_, s.pos - released_);
  released_ = s.pos;
  scanned_ = s.pos;
  if (s.certain) {
    tool_state_ = ToolState::kHeld;
    held_from_ = s.pos;
  }
}

ChatDelta ChatOutputSplitter::push(std::string_view text) {
  ChatDelta out;
  ReasoningPiece r = reasoning_.push(text);
  reasoned_ = reasoned_ || !r.reasoning.empty();
  out.reasoning = std::move(r.reasoning);
  if (!r.content.empty()) content(r.content, out);
  return out;
}

ChatDelta ChatOutputSplitter::finish() {
  ChatDelta out;
  ReasoningPiece r = reasoning_.finish();
  reasoned_ = reasoned_ || !r.reasoning.empty();
  out.reasoning = std::move(r.reasoning);
  if (!r.content.empty()) content(r.content, out);
  if (tool_state_ == ToolState::kHeld) {
    const std::string_view section = std::string_view(text_).substr(held_from_);
    if (auto calls = config_.constrained_calls ? parse_constrained_tool_calls(section)
                                               : parse_section(config_.tools, section)) {
      for (ParsedCall& c : *calls) {
        out.tool_calls.push_back({tool_call_id(config_.tools, config_.id_key,
                                               config_.choice_index, n_calls_++),
                                  std::move(c.name), std::move(c.arguments)});
      }
      released_ = text_.size();
    }
  }
  out.content += text_.substr(std::min(released_, text_.size()));
  tool_state_ = ToolState::kPassThrough;
  text_.clear();
  released_ = 0;
  return out;
}

std::string tool_call_id(ToolParserKind kind, uint64_t id_key, int32_t choice_index,
                         size_t call_index) {
  const std::array<uint64_t, 3> words = {id_key, static_cast<uint64_t>(choice_index),
                                         static_cast<uint64_t>(call_index)};
  std::array<std::byte, 24> bytes{};
  for (size_t w = 0; w < words.size(); ++w) {
    for (size_t b = 0; b < 8; ++b) {
      bytes[w * 8 + b] = static_cast<std::byte>((words[w] >> (8 * b)) & 0xff);
    }
  }
  const Hash128 h = hash_bytes(bytes);
  if (kind == ToolParserKind::kMistral) {
    static constexpr std::string_view kAlnum =
        "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    std::string id;
    uint64_t v = h.lo;
    for (int i = 0; i < 9; ++i) {
      id += kAlnum[v % kAlnum.size()];
      v /= kAlnum.size();
    }
    return id;
  }
  return "call_" + to_hex(h).substr(0, 24);
}

uint64_t tool_call_id_key(const std::vector<int32_t>& prompt_ids, uint64_t seed) {
  std::vector<std::byte> bytes;
  bytes.reserve(prompt_ids.size() * 4);
  for (int32_t id : prompt_ids) {
    const auto u = static_cast<uint32_t>(id);
    for (size_t b = 0; b < 4; ++b) bytes.push_back(static_cast<std::byte>((u >> (8 * b)) & 0xff));
  }
  return hash_bytes(bytes, seed).lo;
}

}  // namespace detllm::server
