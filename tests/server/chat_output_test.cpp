// ChatOutputSplitter (server/tools/chat_output.h) and the reasoning parsers: whole outputs
// split into reasoning, content and tool calls; the same output pushed in every two-piece
// split and byte by byte gives the same result (what a stream reassembles to); call ids are a
// pure function of (request key, choice, call).
#include <gtest/gtest.h>

#include <cctype>

#include "server/tools/chat_output.h"

namespace detllm::server {
namespace {

struct Whole {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;
  bool operator==(const Whole& o) const {
    if (reasoning != o.reasoning || content != o.content || calls.size() != o.calls.size()) {
      return false;
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].id != o.calls[i].id || calls[i].name != o.calls[i].name ||
          calls[i].arguments != o.calls[i].arguments) {
        return false;
      }
    }
    return true;
  }
};

void add(Whole& w, ChatDelta d) {
  w.reasoning += d.reasoning;
  w.content += d.content;
  for (auto& c : d.tool_calls) w.calls.push_back(std::move(c));
}

Whole run(const ChatOutputConfig& cfg, const std::vector<std::string_view>& pieces) {
  ChatOutputSplitter s(cfg);
  Whole w;
  for (std::string_view p : pieces) {
    ChatDelta d = s.push(p);
    EXPECT_TRUE(d.tool_calls.empty());  // calls come whole, at the end
    add(w, std::move(d));
  }
  add(w, s.finish());
  return w;
}

Whole whole(const ChatOutputConfig& cfg, std::string_view text) {
  return run(cfg, {text});
}

// Every split into two pieces, and byte by byte, equals the whole.
void expect_stream_equals_whole(const ChatOutputConfig& cfg, std::string_view text) {
  const Whole w = whole(cfg, text);
  for (size_t i = 0; i <= text.size(); ++i) {
    EXPECT_TRUE(run(cfg, {text.substr(0, i), text.substr(i)}) == w) << "split at " << i << ": "
                                                                      << text;
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  EXPECT_TRUE(run(cfg, bytes) == w) << text;
}

ChatOutputConfig config(ToolParserKind tools,
                        ReasoningParserKind reasoning = ReasoningParserKind::kNone) {
  ChatOutputConfig c;
  c.tools = tools;
  c.reasoning = reasoning;
  c.id_key = 1234;
  return c;
}

TEST(ChatOutput, HermesCallsWithContentBefore) {
  const auto cfg = config(ToolParserKind::kHermes);
  const std::string text =
      "I will look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
      "</tool_call>";
  const Whole w = whole(cfg, text);
  EXPECT_EQ(w.content, "I will look.\n");
  ASSERT_EQ(w.calls.size(), 2u);
  EXPECT_EQ(w.calls[0].name, "get_weather");
  EXPECT_EQ(w.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(w.calls[0].id, tool_call_id(ToolParserKind::kHermes, 1234, 0, 0));
  EXPECT_EQ(w.calls[1].id, tool_call_id(ToolParserKind::kHermes, 1234, 0, 1));
  expect_stream_equals_whole(cfg, text);
}

TEST(ChatOutput, StreamsContentAndHoldsOnlyPossibleMarkers) {
  ChatOutputSplitter s(config(ToolParserKind::kHermes));
  EXPECT_EQ(s.push("Hello <").content, "Hello ");
  EXPECT_EQ(s.push("b> x").content, "<b> x");
  EXPECT_EQ(s.push(" <tool_").content, " ");
  EXPECT_EQ(s.push("call>{\"na").content, "");
  EXPECT_EQ(s.push("me\": \"f\", \"arguments\": {}}").content, "");
  const ChatDelta end = s.finish();
  EXPECT_EQ(end.content, "");
  ASSERT_EQ(end.tool_calls.size(), 1u);
  EXPECT_TRUE(s.called());
}

TEST(ChatOutput, MalformedAndPlainOutputStayContent) {
  for (auto kind : {ToolParserKind::kHermes, ToolParserKind::kLlama3Json, ToolParserKind::kMistral,
                    ToolParserKind::kNone}) {
    for (std::string_view text :
         {"plain answer", "", "<tool_call>{\"name\": broken</tool_call>", "{\"name\": \"a\"",
          "[TOOL_CALLS] [", "  <tool", "ends with <tool_call", "{\"name\": \"a\", \"parameters\": {}} x",
          "日本語 🙂 <tool_call>"}) {
      const Whole w = whole(config(kind), text);
      EXPECT_EQ(w.content, text);
      EXPECT_TRUE(w.calls.empty());
      expect_stream_equals_whole(config(kind), text);
    }
  }
}

TEST(ChatOutput, Llama3AndMistralStreams) {
  const std::string llama = " {\"name\": \"a\", \"parameters\": {\"q\": \"x;y\"}}; {\"name\": \"b\", "
                            "\"parameters\": {}}";
  const Whole l = whole(config(ToolParserKind::kLlama3Json), llama);
  ASSERT_EQ(l.calls.size(), 2u);
  EXPECT_EQ(l.content, "");
  expect_stream_equals_whole(config(ToolParserKind::kLlama3Json), llama);
  const std::string mistral = "Ok [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"k\": [1]}}]";
  const Whole m = whole(config(ToolParserKind::kMistral), mistral);
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(m.content, "Ok ");
  EXPECT_EQ(m.calls[0].id.size(), 9u);  // the mistral template's id rule: 9 letters and digits
  for (char c : m.calls[0].id) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)));
  expect_stream_equals_whole(config(ToolParserKind::kMistral), mistral);
}

TEST(ChatOutput, ReasoningQwen3) {
  const auto cfg = config(ToolParserKind::kNone, ReasoningParserKind::kQwen3);
  Whole w = whole(cfg, "<think>\nStep 1.\n</think>\n\nThe answer is 4.");
  EXPECT_EQ(w.reasoning, "\nStep 1.\n");
  EXPECT_EQ(w.content, "\n\nThe answer is 4.");
  // Not starting with <think>: all content (thinking disabled).
  w = whole(cfg, "The answer is 4. <think>x</think>");
  EXPECT_EQ(w.reasoning, "");
  EXPECT_EQ(w.content, "The answer is 4. <think>x</think>");
  // Cut while thinking: the rest is reasoning.
  w = whole(cfg, "<think>still thinking");
  EXPECT_EQ(w.reasoning, "still thinking");
  EXPECT_EQ(w.content, "");
  for (std::string_view t : {"<think>\nStep 1.\n</think>\n\nThe answer is 4.", "  <think>a</think>b",
                             "<thi", "", "no thinking", "<think>a</thin", "<think></think>"}) {
    expect_stream_equals_whole(cfg, t);
  }
}

TEST(ChatOutput, ReasoningDeepSeekR1) {
  const auto cfg = config(ToolParserKind::kNone, ReasoningParserKind::kDeepSeekR1);
  Whole w = whole(cfg, "Thinking here.</think>Answer.");
  EXPECT_EQ(w.reasoning, "Thinking here.");
  EXPECT_EQ(w.content, "Answer.");
  w = whole(cfg, "<think>T</think>A");
  EXPECT_EQ(w.reasoning, "T");
  EXPECT_EQ(w.content, "A");
  w = whole(cfg, "never closed");
  EXPECT_EQ(w.reasoning, "never closed");
  EXPECT_EQ(w.content, "");
  for (std::string_view t : {"Thinking here.</think>Answer.", "<think>T</think>A", "x</think",
                             "", "é</think>ü"}) {
    expect_stream_equals_whole(cfg, t);
  }
}

TEST(ChatOutput, ReasoningThenToolCall) {
  const auto cfg = config(ToolParserKind::kHermes, ReasoningParserKind::kQwen3);
  const std::string text = "<think>\nI need the weather. <tool_call> is how.\n</think>\n\n"
                           "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": \"P\"}}\n"
                           "</tool_call>";
  const Whole w = whole(cfg, text);
  EXPECT_EQ(w.reasoning, "\nI need the weather. <tool_call> is how.\n");
  EXPECT_EQ(w.content, "\n\n");
  ASSERT_EQ(w.calls.size(), 1u);
  EXPECT_EQ(w.calls[0].arguments, R"({"c":"P"})");
  expect_stream_equals_whole(cfg, text);
}

TEST(ChatOutput, CallIdsArePureFunctionsOfKeyChoiceAndIndex) {
  EXPECT_EQ(tool_call_id(ToolParserKind::kHermes, 7, 0, 0),
            tool_call_id(ToolParserKind::kHermes, 7, 0, 0));
  EXPECT_NE(tool_call_id(ToolParserKind::kHermes, 7, 0, 0),
            tool_call_id(ToolParserKind::kHermes, 7, 0, 1));
  EXPECT_NE(tool_call_id(ToolParserKind::kHermes, 7, 0, 0),
            tool_call_id(ToolParserKind::kHermes, 7, 1, 0));
  EXPECT_NE(tool_call_id(ToolParserKind::kHermes, 7, 0, 0),
            tool_call_id(ToolParserKind::kHermes, 8, 0, 0));
  const std::string id = tool_call_id(ToolParserKind::kLlama3Json, 7, 0, 0);
  EXPECT_EQ(id.size(), 5u + 24u);
  EXPECT_EQ(id.substr(0, 5), "call_");
  EXPECT_EQ(tool_call_id_key({1, 2, 3}, 5), tool_call_id_key({1, 2, 3}, 5));
  EXPECT_NE(tool_call_id_key({1, 2, 3}, 5), tool_call_id_key({1, 2, 3}, 6));
  EXPECT_NE(tool_call_id_key({1, 2, 3}, 5), tool_call_id_key({1, 2, 4}, 5));
}

}  // namespace
}  // namespace detllm::server
