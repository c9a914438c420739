// /v1/chat/completions with tools and the output parsers, end to end without sockets
// (handle_chat_completions over a synthetic model, server_test_util.h): the parsers chosen at
// startup, a request with tools and a tool-call history served, /tokenize rendering tools as
// chat does, reasoning split whole and streamed alike, and a parser's special marker token kept
// in the text it parses.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/chat_parsers.h"
#include "server/chat_prompt.h"
#include "server/handlers.h"
#include "server_test_util.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;
using testing::TinyServer;

constexpr const char* kHermesLike =
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
    "{% endfor %}<assistant>";

// A TinyServer whose tokenizer has a hermes-like chat template and <tool_call> as special
// token 257, with the given parser options.
struct ChatServer {
  TinyServer s;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatPrompt> chat;
  ChatServer(const std::string& tool_parser, const std::string& reasoning_parser) {
    tokenizer = testing::byte_tokenizer(kHermesLike, {"<tool_call>"});
    chat = ChatPrompt::from_tokenizer(*tokenizer);
    s.ctx->tokenizer = tokenizer.get();
    s.ctx->chat = chat.get();
    s.ctx->options.tool_call_parser = tool_parser;
    s.ctx->options.reasoning_parser = reasoning_parser;
    configure_chat_parsers(*s.ctx);
  }
};

json whole(ServerContext& ctx, const json& body) {
  HttpReply r = handle_chat_completions(ctx, body.dump());
  EXPECT_EQ(r.status, 200);
  return json::parse(testing::body_of(r));
}

std::vector<json> stream(ServerContext& ctx, json body) {
  body["stream"] = true;
  HttpReply r = handle_chat_completions(ctx, body.dump());
  const std::string text = testing::body_of(r);
  std::vector<json> out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = text.find("\n\n", pos);
    const std::string payload = text.substr(pos + 6, end - pos - 6);
    if (payload != "[DONE]") out.push_back(json::parse(payload));
    pos = end + 2;
  }
  return out;
}

const json kWeather = {{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"parameters",
                          {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}};

TEST(ChatToolsHandler, ParsersChosenFromOptionsAndTemplate) {
  ChatServer auto_parser("auto", "none");
  EXPECT_EQ(auto_parser.s.ctx->tool_parser, ToolParserKind::kHermes);  // <tool_call> in it
  EXPECT_EQ(auto_parser.s.ctx->tool_marker_ids, (std::vector<int32_t>{257}));  // special here
  EXPECT_TRUE(auto_parser.s.ctx->reasoning_marker_ids.empty());
  ChatServer forced("mistral", "qwen3");
  EXPECT_EQ(forced.s.ctx->tool_parser, ToolParserKind::kMistral);
  EXPECT_EQ(forced.s.ctx->reasoning_parser, ReasoningParserKind::kQwen3);
  TinyServer no_template;  // no chat template: auto finds no format
  configure_chat_parsers(*no_template.ctx);
  EXPECT_EQ(no_template.ctx->tool_parser, ToolParserKind::kNone);
}

// tool_choice "required" is enforced by a grammar: a server without the grammar engine (this
// test's: the engine library alone) refuses it by name, whatever its parser.
TEST(ChatToolsHandler, RequiredToolChoiceNeedsTheGrammarEngine) {
  ChatServer none("none", "none");
  const json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                     {"tools", {kWeather}},
                     {"tool_choice", "required"},
                     {"max_tokens", 1}};
  try {
    handle_chat_completions(*none.s.ctx, body.dump());
    ADD_FAILURE() << "no 400";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "tool_choice");
  }
  ChatServer hermes("hermes", "none");
  try {
    handle_chat_completions(*hermes.s.ctx, body.dump());
    ADD_FAILURE() << "no 400";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "tool_choice");
    EXPECT_NE(std::string(e.what()).find("grammar engine"), std::string::npos) << e.what();
  }
}

TEST(ChatToolsHandler, TokenizeRendersToolsAsChatDoes) {
  ChatServer cs("auto", "none");
  const json messages = {{{"role", "user"}, {"content", "Weather?"}}};
  const json chat = whole(*cs.s.ctx, {{"messages", messages}, {"tools", {kWeather}},
                                      {"max_tokens", 1}});
  HttpReply r = handle_tokenize(*cs.s.ctx, json({{"messages", messages}, {"tools", {kWeather}}}).dump());
  const json tok = json::parse(r.body);
  EXPECT_EQ(tok["count"], chat["usage"]["prompt_tokens"]);
  r = handle_tokenize(*cs.s.ctx, json({{"messages", messages}}).dump());
  EXPECT_LT(json::parse(r.body)["count"], tok["count"]);  // the tools are in the prompt
}

TEST(ChatToolsHandler, ReasoningWholeEqualsStreamed) {
  // deepseek_r1: the synthetic model's bytes never hold </think>: all of it is reasoning.
  ChatServer cs("auto", "deepseek_r1");
  const json body = {
      {"messages",
       {{{"role", "user"}, {"content", "Weather?"}},
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls",
          {{{"id", "c1"},
            {"type", "function"},
            {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "5 C"}}}},
      {"tools", {kWeather}},
      {"max_tokens", 12},
      {"n", 2},
      {"seed", 9},
      {"ignore_eos", true}};
  const json w = whole(*cs.s.ctx, body);
  std::vector<std::string> reasoning(2), content(2), finish(2);
  for (const json& e : stream(*cs.s.ctx, body)) {
    for (const json& c : e["choices"]) {
      const int k = c["index"];
      if (c["delta"].contains("reasoning_content")) reasoning[k] += c["delta"]["reasoning_content"];
      if (c["delta"].contains("content")) content[k] += c["delta"]["content"];
      if (!c["finish_reason"].is_null()) finish[k] = c["finish_reason"];
    }
  }
  for (int k = 0; k < 2; ++k) {
    const json& m = w["choices"][k]["message"];
    EXPECT_EQ(m["content"], nullptr);
    EXPECT_FALSE(m.contains("tool_calls"));
    ASSERT_TRUE(m["reasoning_content"].is_string());
    EXPECT_EQ(reasoning[k], m["reasoning_content"].get<std::string>());
    EXPECT_EQ(content[k], "");
    EXPECT_EQ(finish[k], "length");
    EXPECT_EQ(w["choices"][k]["finish_reason"], "length");
  }
}

TEST(ChatToolsHandler, SpecialMarkerTokensStayInParsedText) {
  ChatServer cs("hermes", "none");
  // logit_bias forces the special <tool_call> token at every step: kept as its text (the
  // parser then finds no JSON after it, so it is content); without tools it is skipped.
  json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
               {"tools", {kWeather}},
               {"max_tokens", 3},
               {"temperature", 0},
               {"ignore_eos", true},
               {"logit_bias", {{"257", 100}}}};
  json w = whole(*cs.s.ctx, body);
  EXPECT_EQ(w["choices"][0]["message"]["content"], "<tool_call><tool_call><tool_call>");
  EXPECT_EQ(w["choices"][0]["finish_reason"], "length");
  body.erase("tools");
  w = whole(*cs.s.ctx, body);
  EXPECT_EQ(w["choices"][0]["message"]["content"], "");
}

}  // namespace
}  // namespace detllm::server
