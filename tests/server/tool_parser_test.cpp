// The tool-call parsers (server/tools/tool_parser.h): each format's valid output, several
// calls, text before the calls, unicode, and malformed output that stays content; choosing a
// parser from a chat template; where a stream must start holding text back.
#include <gtest/gtest.h>

#include "server/tools/tool_parser.h"

namespace detllm::server {
namespace {

void expect_calls(const ToolParse& p, const std::string& content,
                  const std::vector<std::pair<std::string, std::string>>& calls) {
  EXPECT_EQ(p.content, content);
  ASSERT_EQ(p.calls.size(), calls.size()) << p.content;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(p.calls[i].name, calls[i].first);
    EXPECT_EQ(p.calls[i].arguments, calls[i].second);
  }
}

void expect_content(ToolParserKind kind, const std::string& text) {
  const ToolParse p = parse_tool_calls(kind, text);
  EXPECT_EQ(p.content, text);
  EXPECT_TRUE(p.calls.empty()) << text;
}

TEST(ToolParser, Hermes) {
  const auto k = ToolParserKind::kHermes;
  expect_calls(parse_tool_calls(k, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                   "{\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>"),
               "", {{"get_weather", R"({"city":"Paris","unit":"c"})"}});
  // Text before the calls is content; several calls; the key order the model wrote is kept.
  expect_calls(parse_tool_calls(k, "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": "
                                   "{\"z\": 1, \"a\": [1, 2]}}\n</tool_call>\n<tool_call>\n"
                                   "{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n"),
               "Let me check.\n", {{"a", R"({"z":1,"a":[1,2]})"}, {"b", "{}"}});
  // The last block may end at end-of-text without its closing tag.
  expect_calls(parse_tool_calls(k, "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": \"}\"}}"),
               "", {{"a", R"({"x":"}"})"}});
  // Unicode, in text and arguments, and escapes.
  expect_calls(parse_tool_calls(k, "Voilà 🙂 <tool_call>{\"name\": \"dire\", \"arguments\": "
                                   "{\"texte\": \"日本語 \\u00e9 \\\"q\\\"\"}}</tool_call>"),
               "Voilà 🙂 ", {{"dire", "{\"texte\":\"日本語 é \\\"q\\\"\"}"}});
  // No marker: content.
  expect_content(k, "The weather is fine.");
  expect_content(k, "");
  // Malformed: the whole text stays content.
  expect_content(k, "x <tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}</tool_call>");
  expect_content(k, "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}}</tool_call> and more");
  expect_content(k, "<tool_call>{\"arguments\": {}}</tool_call>");
  expect_content(k, "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>");
  expect_content(k, "<tool_call>{\"name\": \"a\", \"arguments\": \"x=1\"}</tool_call>");
  expect_content(k, "<tool_call>{\"name\": \"a\"}</tool_call>");
  expect_content(k, "<tool_call>[1, 2]</tool_call>");
  expect_content(k, "<tool_call>");
  expect_content(k, "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": tru}}</tool_call>");
}

TEST(ToolParser, Llama3Json) {
  const auto k = ToolParserKind::kLlama3Json;
  expect_calls(parse_tool_calls(k, "{\"name\": \"get_weather\", \"parameters\": {\"city\": "
                                   "\"Paris\"}}"),
               "", {{"get_weather", R"({"city":"Paris"})"}});
  expect_calls(parse_tool_calls(k, "<|python_tag|>{\"name\": \"f\", \"arguments\": {\"n\": 1.5}}"),
               "", {{"f", R"({"n":1.5})"}});
  // Several, separated by ';', with whitespace around.
  expect_calls(parse_tool_calls(k, "  {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", "
                                   "\"parameters\": {\"q\": \"ünï\"}}\n"),
               "", {{"a", "{}"}, {"b", R"({"q":"ünï"})"}});
  expect_content(k, "The answer is {\"name\": \"a\", \"parameters\": {}}");
  expect_content(k, "{\"name\": \"a\", \"parameters\": {}} trailing");
  expect_content(k, "{\"name\": \"a\", \"parameters\": {}};");
  expect_content(k, "{\"name\": \"a\", \"parameters\": [1]}");
  expect_content(k, "{\"city\": \"Paris\"}");
  expect_content(k, "{\"name\": \"a\", \"parameters\": {");
  expect_content(k, "<|python_tag|>brave_search.call(query=\"x\")");
}

TEST(ToolParser, Mistral) {
  const auto k = ToolParserKind::kMistral;
  expect_calls(parse_tool_calls(k, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": "
                                   "{\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]"),
               "", {{"get_weather", R"({"city":"Paris"})"}});
  expect_calls(parse_tool_calls(k, "Sure.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, "
                                   "{\"name\": \"b\", \"arguments\": {\"s\": \"é\"}}]"),
               "Sure.", {{"a", "{}"}, {"b", R"({"s":"é"})"}});
  expect_calls(parse_tool_calls(k, "[TOOL_CALLS]{\"name\": \"a\", \"arguments\": {}}"), "",
               {{"a", "{}"}});
  expect_content(k, "[TOOL_CALLS] []");
  expect_content(k, "[TOOL_CALLS] [{\"name\": \"a\"}]");
  expect_content(k, "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}] more");
  expect_content(k, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}");
  expect_content(k, "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}");
}

TEST(ToolParser, NoneParsesNothing) {
  expect_content(ToolParserKind::kNone, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>");
}

TEST(ToolParser, DetectFromTemplateAndNames) {
  EXPECT_EQ(detect_tool_parser("{{- '<tool_call>\\n' }}"), ToolParserKind::kHermes);
  EXPECT_EQ(detect_tool_parser("{{ '[TOOL_CALLS]' + tool_calls|tojson }}"),
            ToolParserKind::kMistral);
  EXPECT_EQ(detect_tool_parser("{{- \"Environment: ipython\\n\" }}"), ToolParserKind::kLlama3Json);
  EXPECT_EQ(detect_tool_parser("{{- '<|python_tag|>' }}"), ToolParserKind::kLlama3Json);
  EXPECT_EQ(detect_tool_parser("{% for m in messages %}{{ m.content }}{% endfor %}"),
            ToolParserKind::kNone);
  for (auto k : {ToolParserKind::kNone, ToolParserKind::kLlama3Json, ToolParserKind::kHermes,
                 ToolParserKind::kMistral}) {
    EXPECT_EQ(tool_parser_from_name(tool_parser_name(k)), k);
  }
  EXPECT_FALSE(tool_parser_from_name("auto").has_value());
  EXPECT_FALSE(tool_parser_from_name("pythonic").has_value());
}

TEST(ToolParser, SectionStartHoldsOnlyWhatMayBeAMarker) {
  const auto h = ToolParserKind::kHermes;
  SectionStart s = find_section_start(h, "Hello <tool");
  EXPECT_EQ(s.pos, 6u);
  EXPECT_FALSE(s.certain);
  s = find_section_start(h, "Hello <b>");
  EXPECT_EQ(s.pos, 9u);  // nothing held
  s = find_section_start(h, "Hello <tool_call>{");
  EXPECT_EQ(s.pos, 6u);
  EXPECT_TRUE(s.certain);
  // A marker that straddles the scanned part is found.
  s = find_section_start(h, "Hello <tool_call>{", 9);
  EXPECT_EQ(s.pos, 6u);
  EXPECT_TRUE(s.certain);
  const auto l = ToolParserKind::kLlama3Json;
  EXPECT_EQ(find_section_start(l, "  ").pos, 0u);
  EXPECT_FALSE(find_section_start(l, "  ").certain);
  EXPECT_EQ(find_section_start(l, "<|pyth").pos, 0u);
  EXPECT_TRUE(find_section_start(l, " {").certain);
  EXPECT_EQ(find_section_start(l, "Hi").pos, std::string_view::npos);
}

}  // namespace
}  // namespace detllm::server
