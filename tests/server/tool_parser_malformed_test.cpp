// Malformed model output for the chat output parsers (server/tools/): seeded mutations of
// valid tool calls (bytes cut, dropped, duplicated, replaced by JSON punctuation or markers)
// never crash a parser and keep the invariants of tests/fuzz/tool_parser_fuzz.cpp: without
// calls the content is the whole text, with calls it is a prefix of it and each call's
// arguments are a JSON object; a stream of any piece size gives what the whole output gives.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>

#include "server/tools/chat_output.h"
#include "server/tools/tool_parser.h"

namespace detllm::server {
namespace {

std::string split_all(const ChatOutputConfig& cfg, std::string_view text, size_t piece) {
  ChatOutputSplitter s(cfg);
  std::string reasoning, content, calls;
  auto collect = [&](const ChatDelta& d) {
    reasoning += d.reasoning;
    content += d.content;
    for (const ToolCall& c : d.tool_calls) calls += c.id + "|" + c.name + "|" + c.arguments + "\n";
  };
  for (size_t i = 0; i < text.size(); i += piece) collect(s.push(text.substr(i, piece)));
  collect(s.finish());
  return reasoning + "\x01" + content + "\x01" + calls;
}

TEST(ToolParserMalformed, SeededMutationsKeepTheInvariants) {
  const std::vector<std::string> seeds = {
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}\n</tool_call>",
      "Text first <tool_call>{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"]}\"}]}}"
      "</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>",
      "{\"name\": \"f\", \"parameters\": {\"q\": \"a;b\"}}; {\"name\": \"g\", \"parameters\": {}}",
      "<|python_tag|>{\"name\": \"f\", \"arguments\": {\"s\": \"\\\"esc\\\"\"}}",
      "Ok.[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"k\": 1}, \"id\": \"abcdefghi\"}]",
      "<think>\nreason <tool_call>\n</think>\n\n<tool_call>{\"name\": \"a\", \"arguments\": {}}"
      "</tool_call>",
  };
  const std::vector<std::string> inserts = {"{", "}", "[", "]", "\"", "\\", ";", ",", ":",
                                            "<tool_call>", "</tool_call>", "[TOOL_CALLS]",
                                            "<think>", "</think>", "\xc3", "🙂", "\n", "null"};
  std::mt19937 rng(20261206);
  int n_calls = 0;
  int n_content = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = seeds[rng() % seeds.size()];
    const int n_mut = static_cast<int>(rng() % 4);
    for (int m = 0; m < n_mut && !text.empty(); ++m) {
      const size_t pos = rng() % text.size();
      switch (rng() % 4) {
        case 0: text.resize(pos); break;
        case 1: text.erase(pos, 1 + rng() % 4); break;
        case 2: text.insert(pos, text.substr(pos, rng() % 8)); break;
        default: text.insert(pos, inserts[rng() % inserts.size()]); break;
      }
    }
    for (auto kind :
         {ToolParserKind::kLlama3Json, ToolParserKind::kHermes, ToolParserKind::kMistral}) {
      const ToolParse p = parse_tool_calls(kind, text);
      if (p.calls.empty()) {
        ASSERT_EQ(p.content, text);
        ++n_content;
      } else {
        ASSERT_EQ(text.compare(0, p.content.size(), p.content), 0) << text;
        ++n_calls;
      }
      for (const ParsedCall& c : p.calls) {
        ASSERT_FALSE(c.name.empty());
        ASSERT_TRUE(nlohmann::json::parse(c.arguments, nullptr, false).is_object()) << text;
      }
      for (auto reasoning : {ReasoningParserKind::kNone, ReasoningParserKind::kQwen3,
                             ReasoningParserKind::kDeepSeekR1}) {
        ChatOutputConfig cfg;
        cfg.tools = kind;
        cfg.reasoning = reasoning;
        const std::string whole = split_all(cfg, text, text.size() + 1);
        const size_t piece = 1 + rng() % 7;
        ASSERT_EQ(split_all(cfg, text, piece), whole) << "piece " << piece << ": " << text;
      }
    }
  }
  // Both outcomes are exercised.
  EXPECT_GT(n_calls, 300);
  EXPECT_GT(n_content, 300);
}

}  // namespace
}  // namespace detllm::server
