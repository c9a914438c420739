// Chat requests with tools rendered by the server (parse_chat_body + ChatPrompt) against the
// reference prompts of tests/data/chat/tool_prompts.json (scripts/ref/tool_prompt_golden.py:
// jinja2 with transformers' settings, inputs built as vLLM builds them): tools, an assistant's
// tool_calls (arguments parsed, key order kept), tool messages, chat_template_kwargs. The
// qwen3 template is the real tokenizer_config.json's (tests/external_data.h).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "external_data.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/server_test_util.h"

namespace detllm::server {
namespace {

using ojson = nlohmann::ordered_json;

ojson golden() {
  std::ifstream f(std::string(DETLLM_SOURCE_DIR) + "/tests/data/chat/tool_prompts.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return ojson::parse(ss.str());
}

TEST(ToolPrompt, MatchesTheReference) {
  const ojson g = golden();
  std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers;
  for (const auto& [name, t] : g.at("templates").items()) {
    if (t.contains("source")) {
      tokenizers[name] = testing::byte_tokenizer(t.at("source").get<std::string>());
    } else if (!test::missing_tokenizer_file({name.c_str()})) {
      tokenizers[name] = Tokenizer::from_json_file(test::tokenizer_file(name));
    }
  }
  int n_checked = 0;
  for (const ojson& c : g.at("cases")) {
    const std::string tname = c.at("template").get<std::string>();
    if (!tokenizers.count(tname)) continue;  // the real file is missing: skipped below
    const auto prompt = ChatPrompt::from_tokenizer(*tokenizers[tname]);
    ASSERT_NE(prompt, nullptr);
    // The body as the client wrote it (ordered), parsed by the server.
    const std::string body = g.at("requests").at(c.at("request").get<std::string>()).dump();
    const ChatRequest req = parse_chat_body(body, RequestLimits{});
    SCOPED_TRACE(tname + " / " + c.at("request").get<std::string>());
    if (c.contains("error")) {
      EXPECT_THROW(prompt->render(req.messages, true, req.tools, req.chat_template_kwargs),
                   ApiError);
    } else {
      EXPECT_EQ(prompt->render(req.messages, true, req.tools, req.chat_template_kwargs),
                c.at("output").get<std::string>());
    }
    ++n_checked;
  }
  EXPECT_GE(n_checked, 10);
  if (auto m = test::missing_tokenizer_file({"qwen3"})) GTEST_SKIP() << *m;
}

TEST(ToolPrompt, TemplateThatIgnoresToolsStillRenders) {
  // The default model's template has no tool syntax: tool messages render as their role.
  auto tok = testing::byte_tokenizer(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}");
  const auto prompt = ChatPrompt::from_tokenizer(*tok);
  const ChatRequest req = parse_chat_body(R"({"messages": [{"role": "user", "content": "q"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "r"}],
      "tools": [{"type": "function", "function": {"name": "f"}}]})",
                                          RequestLimits{});
  EXPECT_EQ(prompt->render(req.messages, false, req.tools), "<user>q<assistant><tool>r");
}

}  // namespace
}  // namespace detllm::server
