// The grammar seam for tool_choice "required" / a named function (server/tools/
// tool_call_schema.h): the schema built from the tools, and reading a constrained output back.
#include <gtest/gtest.h>

#include "server/tools/tool_call_schema.h"

namespace detllm::server {
namespace {

using ojson = nlohmann::ordered_json;

std::vector<ToolSpec> tools() {
  ToolSpec weather;
  weather.name = "get_weather";
  weather.parameters = ojson::parse(
      R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");
  ToolSpec time;
  time.name = "get_time";
  time.parameters = ojson::object();
  return {weather, time};
}

TEST(ToolCallSchema, RequiredIsAnArrayOfAnyTool) {
  const auto s = tool_call_schema(tools(), {ToolChoice::Kind::kRequired, ""}, true);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->dump(),
            R"({"type":"array","items":{"anyOf":[)"
            R"({"type":"object","properties":{"name":{"type":"string","enum":["get_weather"]},)"
            R"("arguments":{"type":"object","properties":{"city":{"type":"string"}},)"
            R"("required":["city"]}},"required":["name","arguments"],"additionalProperties":false},)"
            R"({"type":"object","properties":{"name":{"type":"string","enum":["get_time"]},)"
            R"("arguments":{"type":"object"}},"required":["name","arguments"],)"
            R"("additionalProperties":false}]},"minItems":1})");
}

TEST(ToolCallSchema, NamedAndNotParallel) {
  const auto s = tool_call_schema(tools(), {ToolChoice::Kind::kNamed, "get_time"}, false);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ((*s)["items"]["properties"]["name"]["enum"][0], "get_time");
  EXPECT_EQ((*s)["maxItems"], 1);
  EXPECT_FALSE(tool_call_schema(tools(), {ToolChoice::Kind::kAuto, ""}, true).has_value());
  EXPECT_FALSE(tool_call_schema(tools(), {ToolChoice::Kind::kNone, ""}, true).has_value());
  EXPECT_FALSE(tool_call_schema(tools(), {ToolChoice::Kind::kNamed, "other"}, true).has_value());
}

TEST(ToolCallSchema, TriggersAndConstrainedOutput) {
  EXPECT_EQ(tool_call_trigger(ToolParserKind::kHermes), "<tool_call>");
  EXPECT_EQ(tool_call_trigger(ToolParserKind::kMistral), "[TOOL_CALLS]");
  EXPECT_EQ(tool_call_trigger(ToolParserKind::kLlama3Json), "");
  const auto calls = parse_constrained_tool_calls(
      R"( [{"name": "get_weather", "arguments": {"city": "Zürich"}}, {"name": "get_time", "arguments": {}}] )");
  ASSERT_TRUE(calls.has_value());
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[0].arguments, R"({"city":"Zürich"})");
  EXPECT_FALSE(parse_constrained_tool_calls("[]").has_value());
  EXPECT_FALSE(parse_constrained_tool_calls(R"({"name": "a", "arguments": {}})").has_value());
  EXPECT_FALSE(parse_constrained_tool_calls(R"([{"name": "a"}])").has_value());
  EXPECT_FALSE(parse_constrained_tool_calls(R"([{"name": "a", "arguments": {}}] x)").has_value());
}

}  // namespace
}  // namespace detllm::server
