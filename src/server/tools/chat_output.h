// ChatOutputSplitter: one chat choice's output text -> reasoning, content and tool calls, as
// a stream of deltas. Streaming and whole responses both run it (whole = push everything,
// then finish), so a streamed choice reassembles to exactly the whole one.
//
//   text ──► ReasoningSplitter ──reasoning──────────────────────────────► delta.reasoning
//                    └──content──► tool stage: content until a call section may start,
//                                  then held to the end: parse_section -> tool calls,
//                                  or (no parse) released as content
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/tools/reasoning_parser.h"
#include "server/tools/tool_parser.h"
#include "server/tools/tool_spec.h"

namespace detllm::server {

struct ChatOutputConfig {
  ReasoningParserKind reasoning = ReasoningParserKind::kNone;
  ToolParserKind tools = ToolParserKind::kNone;  // kNone: the request parses no tool calls
  // Call ids: a pure function of (id_key, choice index, call index), so a replay of a seeded
  // request gives the same ids. id_key: tool_call_id_key below.
  uint64_t id_key = 0;
  int32_t choice_index = 0;
  // tool_choice "required" or a named function: a grammar made the whole output a JSON array
  // of calls (tool_call_schema.h), read with parse_constrained_tool_calls.
  bool constrained_calls = false;
};

// What one push or finish releases.
struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;  // whole calls (only from finish)
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ChatOutputSplitter {
 public:
  explicit ChatOutputSplitter(const ChatOutputConfig& config);
  ChatDelta push(std::string_view text);
  ChatDelta finish();
  bool called() const { return n_calls_ > 0; }     // finish found tool calls
  bool reasoned() const { return reasoned_; }      // some reasoning text was released

 private:
  void content(std::string_view piece, ChatDelta& out);  // the tool stage

  enum class ToolState : uint8_t { kScanning, kHeld, kPassThrough };
  ChatOutputConfig config_;
  ReasoningSplitter reasoning_;
  ToolState tool_state_;
  std::string text_;      // every content byte so far (the tool stage's input)
  size_t released_ = 0;   // text_[0, released_) went out as content
  size_t scanned_ = 0;    // no section starts in text_[0, scanned_)
  size_t held_from_ = 0;  // kHeld: the section's start
  size_t n_calls_ = 0;
  bool reasoned_ = false;
};

// The id of call `call_index` of choice `choice_index`: "call_" + 24 hex digits, or for the
// mistral format 9 letters and digits (its template refuses other ids in the history).
std::string tool_call_id(ToolParserKind kind, uint64_t id_key, int32_t choice_index,
                         size_t call_index);
// The request's id key: a hash of its prompt tokens and seed (so ids differ between turns of
// a conversation and repeat in a replay).
uint64_t tool_call_id_key(const std::vector<int32_t>& prompt_ids, uint64_t seed);

}  // namespace detllm::server
