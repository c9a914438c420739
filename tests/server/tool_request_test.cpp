// The tool fields of a chat request (server/tools/tool_request.h through parse_chat_request):
// tools, tool_choice, parallel_tool_calls, chat_template_kwargs, an assistant's tool_calls and
// a tool message's tool_call_id — what is accepted, and each bad field's 400 naming it; /tokenize
// takes tools and chat_template_kwargs with its messages.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/api_error_expect.h"
#include "server/openai_schema.h"

namespace detllm::server {
namespace {

ChatRequest chat(const std::string& body) {
  return parse_chat_body(body, RequestLimits{});
}

const std::string kUser = R"("messages": [{"role": "user", "content": "Weather?"}])";
const std::string kTool = R"({"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}, "description": "Weather of a city"}})";

std::string with(const std::string& fields) {
  return "{" + kUser + ", " + fields + "}";
}

TEST(ToolRequest, ToolsAndChoice) {
  const ChatRequest c = chat(with(R"("tools": [)" + kTool + R"(])"));
  ASSERT_EQ(c.tools.size(), 1u);
  EXPECT_EQ(c.tools[0].name, "get_weather");
  EXPECT_EQ(c.tool_choice.kind, ToolChoice::Kind::kAuto);  // default with tools
  EXPECT_TRUE(c.parses_tool_calls());
  EXPECT_TRUE(c.parallel_tool_calls);
  // The client's key order is kept (the template prints the function with tojson).
  EXPECT_EQ(c.tools[0].function.dump(),
            R"({"name":"get_weather","parameters":{"type":"object","properties":{"city":)"
            R"({"type":"string"}},"required":["city"]},"description":"Weather of a city"})");
  EXPECT_EQ(c.tools[0].parameters.begin().key(), "type");

  EXPECT_EQ(chat("{" + kUser + "}").tool_choice.kind, ToolChoice::Kind::kNone);
  EXPECT_FALSE(chat("{" + kUser + "}").parses_tool_calls());
  EXPECT_EQ(chat(with(R"("tools": [], "tool_choice": "auto")")).tool_choice.kind,
            ToolChoice::Kind::kAuto);
  EXPECT_FALSE(chat(with(R"("tools": [], "tool_choice": "auto")")).parses_tool_calls());
  const ChatRequest none = chat(with(R"("tools": [)" + kTool + R"(], "tool_choice": "none")"));
  EXPECT_FALSE(none.parses_tool_calls());
  EXPECT_EQ(chat(with(R"("tools": [)" + kTool + R"(], "tool_choice": "required")")).tool_choice.kind,
            ToolChoice::Kind::kRequired);
  const ChatRequest named = chat(with(R"("tools": [)" + kTool + R"(], "tool_choice":
      {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": false)"));
  EXPECT_EQ(named.tool_choice.kind, ToolChoice::Kind::kNamed);
  EXPECT_EQ(named.tool_choice.name, "get_weather");
  EXPECT_FALSE(named.parallel_tool_calls);
  // A tool with only a name.
  const ChatRequest bare = chat(with(R"("tools": [{"type": "function", "function": {"name": "f"}}])"));
  EXPECT_TRUE(bare.tools[0].parameters.empty());
}

TEST(ToolRequest, BadToolsAre400sNamingTheField) {
  EXPECT_BAD(chat(with(R"("tools": {"type": "function"})")), "tools", "list of function tools");
  EXPECT_BAD(chat(with(R"("tools": [5])")), "tools[0]", "JSON object");
  EXPECT_BAD(chat(with(R"("tools": [{"type": "retrieval", "function": {"name": "f"}}])")),
             "tools[0].type", "\"function\"");
  EXPECT_BAD(chat(with(R"("tools": [{"function": {"name": "f"}}])")), "tools[0].type",
             "\"function\"");
  EXPECT_BAD(chat(with(R"("tools": [{"type": "function", "function": {}}])")),
             "tools[0].function.name", "required");
  EXPECT_BAD(chat(with(R"("tools": [{"type": "function", "function": {"name": "a b"}}])")),
             "tools[0].function.name", "letters, digits");
  EXPECT_BAD(chat(with(R"("tools": [{"type": "function", "function": {"name": ""}}])")),
             "tools[0].function.name", "1 to 64");
  EXPECT_BAD(chat(with(R"("tools": [{"type": "function", "function": {"name": "f",
                 "parameters": "object"}}])")),
             "tools[0].function.parameters", "JSON schema");
  EXPECT_BAD(chat(with(R"("tools": [{"type": "function", "function": {"name": "f",
                 "description": 3}}])")),
             "tools[0].function.description", "string");
  EXPECT_BAD(chat(with(R"("tools": [{"type": "function", "function": {"name": "f",
                 "strict": "yes"}}])")),
             "tools[0].function.strict", "boolean");
  EXPECT_BAD(chat(with(R"("tools": [{"type": "function", "function": {"name": "f", "x": 1}}])")),
             "tools[0].function.x", "unrecognized");
  EXPECT_BAD(chat(with(R"("tools": [{"type": "function", "function": {"name": "f"}, "y": 1}])")),
             "tools[0].y", "unrecognized");
  EXPECT_BAD(chat(with(R"("tools": [{"type": "function", "function": {"name": "f"}},
                                    {"type": "function", "function": {"name": "f"}}])")),
             "tools[1].function.name", "two tools");
}

TEST(ToolRequest, BadToolChoiceAre400s) {
  const std::string tools = R"("tools": [)" + kTool + "]";
  EXPECT_BAD(chat(with(tools + R"(, "tool_choice": "always")")), "tool_choice", "expected");
  EXPECT_BAD(chat(with(tools + R"(, "tool_choice": 1)")), "tool_choice", "string or an object");
  EXPECT_BAD(chat(with(tools + R"(, "tool_choice": {"type": "function",
                 "function": {"name": "get_time"}})")),
             "tool_choice.function.name", "not one of 'tools'");
  EXPECT_BAD(chat(with(tools + R"(, "tool_choice": {"type": "function"})")),
             "tool_choice.function", "required");
  EXPECT_BAD(chat(with(tools + R"(, "tool_choice": {"type": "tool",
                 "function": {"name": "get_weather"}})")),
             "tool_choice.type", "\"function\"");
  EXPECT_BAD(chat(with(R"("tool_choice": "required")")), "tool_choice", "'tools' is empty");
  EXPECT_BAD(chat(with(R"("tools": [], "tool_choice": {"type": "function",
                 "function": {"name": "f"}})")),
             "tool_choice", "'tools' is empty");
  EXPECT_BAD(chat(with(tools + R"(, "parallel_tool_calls": "no")")), "parallel_tool_calls",
             "boolean");
}

TEST(ToolRequest, HistoryWithToolCallsAndToolMessages) {
  const ChatRequest c = chat(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}]})");
  ASSERT_EQ(c.messages.size(), 3u);
  ASSERT_EQ(c.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(c.messages[1].content, "");
  EXPECT_EQ(c.messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(c.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(c.messages[1].tool_calls[0].arguments, R"({"city": "Paris"})");
  EXPECT_EQ(c.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(c.messages[2].content, "21 C");
}

TEST(ToolRequest, BadHistoryAre400s) {
  auto msgs = [](const std::string& m) {
    return chat(R"({"messages": [{"role": "user", "content": "x"}, )" + m + "]}");
  };
  EXPECT_BAD(msgs(R"({"role": "user", "content": "y", "tool_calls": []})"),
             "messages[1].tool_calls", "only allowed in an assistant message");
  EXPECT_BAD(msgs(R"({"role": "assistant", "tool_calls": {}})"), "messages[1].tool_calls",
             "list of tool calls");
  EXPECT_BAD(msgs(R"({"role": "assistant", "tool_calls": [{"type": "function",
                 "function": {"name": "f", "arguments": "{}"}}]})"),
             "messages[1].tool_calls[0].id", "required");
  EXPECT_BAD(msgs(R"({"role": "assistant", "tool_calls": [{"id": "c", "type": "code",
                 "function": {"name": "f", "arguments": "{}"}}]})"),
             "messages[1].tool_calls[0].type", "\"function\"");
  EXPECT_BAD(msgs(R"({"role": "assistant", "tool_calls": [{"id": "c", "function":
                 {"name": "f"}}]})"),
             "messages[1].tool_calls[0].function.arguments", "required");
  EXPECT_BAD(msgs(R"({"role": "assistant", "tool_calls": [{"id": "c", "function":
                 {"name": "f", "arguments": {"a": 1}}}]})"),
             "messages[1].tool_calls[0].function.arguments", "string");
  EXPECT_BAD(msgs(R"({"role": "assistant", "tool_calls": [{"id": "c", "function":
                 {"name": "f", "arguments": "{not json"}}]})"),
             "messages[1].tool_calls[0].function.arguments", "JSON text");
  EXPECT_BAD(msgs(R"({"role": "tool", "content": "r"})"), "messages[1].tool_call_id",
             "required in a tool message");
  EXPECT_BAD(msgs(R"({"role": "user", "content": "r", "tool_call_id": "c"})"),
             "messages[1].tool_call_id", "only allowed in a tool message");
}

TEST(ToolRequest, ChatTemplateKwargs) {
  const ChatRequest c =
      chat(with(R"("chat_template_kwargs": {"enable_thinking": false, "a_flag": 1})"));
  EXPECT_EQ(c.chat_template_kwargs.dump(), R"({"enable_thinking":false,"a_flag":1})");
  EXPECT_BAD(chat(with(R"("chat_template_kwargs": [1])")), "chat_template_kwargs", "object");
  EXPECT_BAD(chat(with(R"("chat_template_kwargs": {"messages": []})")), "chat_template_kwargs",
             "may not set 'messages'");
}

TEST(ToolRequest, TokenizeTakesToolsWithMessages) {
  const TokenizeRequest t = parse_tokenize_body(
      "{" + kUser + R"(, "tools": [)" + kTool + R"(], "chat_template_kwargs": {"x": 1}})",
      RequestLimits{});
  ASSERT_EQ(t.tools.size(), 1u);
  EXPECT_EQ(t.tools[0].function.begin().key(), "name");  // the client's order
  EXPECT_EQ(t.chat_template_kwargs.dump(), R"({"x":1})");
  EXPECT_BAD(parse_tokenize_body(R"({"prompt": "p", "tools": [)" + kTool + "]}", RequestLimits{}),
             "tools", "not for a 'prompt'");
  EXPECT_BAD(parse_tokenize_body(R"({"prompt": "p", "chat_template_kwargs": {"a": 1}})",
                                 RequestLimits{}),
             "chat_template_kwargs", "not for a 'prompt'");
}

}  // namespace
}  // namespace detllm::server
