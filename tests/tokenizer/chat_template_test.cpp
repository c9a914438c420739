// Chat templates: exact equality with transformers on the real templates (Llama-2-chat,
// Llama-3, Qwen3, SmolLM2) x conversations (goldens: tests/data/chat/golden.json from
// scripts/ref/chat_template_golden.py), and the context render() builds. The Jinja language
// itself (the golden snippets, errors, limits) is tested in tests/jinja.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "external_data.h"
#include "formats/gguf.h"
#include "tokenizer/chat_template.h"

namespace detllm {
namespace {

using ordered_json = nlohmann::ordered_json;
using json = nlohmann::json;

std::string source_dir() {
  return DETLLM_SOURCE_DIR;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ordered_json& golden() {
  static const ordered_json g =
      ordered_json::parse(read_file(source_dir() + "/tests/data/chat/golden.json"));
  return g;
}

std::string show(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::vector<ChatMessage> to_messages(const ordered_json& list) {
  std::vector<ChatMessage> messages;
  for (const auto& m : list) {
    ChatMessage cm;
    cm.role = m.at("role").get<std::string>();
    cm.content = m.at("content").get<std::string>();
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() != "role" && it.key() != "content")
        cm.extra[it.key()] = json::parse(it.value().dump());
    }
    messages.push_back(std::move(cm));
  }
  return messages;
}

TEST(ChatTemplateGolden, RealTemplatesMatchTransformers) {
  const auto& g = golden();
  size_t checked = 0;
  for (const auto& r : g.at("renders")) {
    const std::string tname = r.at("template").get<std::string>();
    const std::string cname = r.at("conversation").get<std::string>();
    const auto& t = g.at("templates").at(tname);
    const auto& conv = g.at("conversations").at(cname);
    const bool agp = r.at("add_generation_prompt").get<bool>();
    SCOPED_TRACE(tname + " x " + cname + (agp ? " +gen" : ""));
    const ChatTemplate tpl = ChatTemplate::parse(t.at("source").get<std::string>());
    const json extra = conv.contains("extra_context") ? json::parse(conv.at("extra_context").dump())
                                                      : json::object();
    const auto messages = to_messages(conv.at("messages"));
    const std::string bos = t.at("bos_token").get<std::string>();
    const std::string eos = t.at("eos_token").get<std::string>();
    if (r.contains("error")) {
      EXPECT_THROW(tpl.render(messages, agp, bos, eos, extra), Error) << r.at("error");
    } else {
      std::string out;
      ASSERT_NO_THROW(out = tpl.render(messages, agp, bos, eos, extra));
      EXPECT_EQ(out, r.at("output").get<std::string>())
          << "got      " << show(out) << "\nexpected " << show(r.at("output").get<std::string>());
    }
    ++checked;
  }
  EXPECT_EQ(checked, 4 * g.at("conversations").size() * 2);
}

TEST(ChatTemplateGolden, TemplatesAreTheRealOnes) {
  const auto& t = golden().at("templates");
  if (auto m = test::missing_tokenizer_file({"llama3", "qwen3"}, "tokenizer_config.json"))
    GTEST_SKIP() << *m;
  for (const char* name : {"llama3", "qwen3"}) {
    const json config = json::parse(read_file(test::tokenizer_file(name, "tokenizer_config.json")));
    EXPECT_EQ(config.at("chat_template").get<std::string>(),
              t.at(name).at("source").get<std::string>())
        << name;
  }
  EXPECT_EQ(read_file(source_dir() + "/tests/data/chat/llama2_template.jinja"),
            t.at("llama2").at("source").get<std::string>());
  const std::string smol = read_file(source_dir() + "/tests/data/chat/smollm2_template.jinja");
  EXPECT_EQ(smol, t.at("smollm2").at("source").get<std::string>());
  const char* env = std::getenv("DETLLM_DEFAULT_MODEL");
  const std::string model =
      (env && *env) ? env : source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no default model at " << model;
  EXPECT_EQ(GgufFile::open(model)->get_string("tokenizer.chat_template"), smol);
}

// ---- the render() API --------------------------------------------------------------------

TEST(ChatTemplateApi, ContextIsBuiltAsTransformersDoes) {
  const ChatTemplate t = ChatTemplate::parse(
      "{{ bos_token is defined }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|"
      "{% for m in messages %}{{ m|tojson }};{% endfor %}|{{ add_generation_prompt }}|{{ custom "
      "}}");
  std::vector<ChatMessage> messages(2);
  messages[0] = {"user", "hi", json{{"name", "bob"}, {"skip", nullptr}}};
  messages[1] = {"assistant", "ok", json{{"reasoning", "because"}}};
  const std::string out = t.render(messages, true, "", "</s>", json{{"custom", 7}});
  EXPECT_EQ(out,
            "False|</s>|True|True|{\"role\": \"user\", \"content\": \"hi\", \"name\": \"bob\"};"
            "{\"thinking\": \"because\", \"role\": \"assistant\", \"content\": \"ok\", "
            "\"reasoning\": \"because\", \"reasoning_content\": \"because\"};|True|7");
  // extra_context overrides tools; it may not replace messages.
  EXPECT_EQ(
      ChatTemplate::parse("{{ tools|length }}").render({}, false, "", "", json{{"tools", {1, 2}}}),
      "2");
  EXPECT_THROW(t.render(messages, false, "", "", json{{"messages", 1}}), Error);
  // A "content" field in extra replaces the string (multimodal parts); null drops it.
  const ChatTemplate c = ChatTemplate::parse(
      "{% for m in messages %}{{ m.content is defined }}{{ m.content }}{% endfor %}");
  EXPECT_EQ(c.render({{"user", "x", json{{"content", {"part"}}}}}, false, "", ""), "True['part']");
  EXPECT_EQ(c.render({{"user", "x", json{{"content", nullptr}}}}, false, "", ""), "False");
}

TEST(ChatTemplateApi, ParsedTemplateIsReusableAndCopyable) {
  const ChatTemplate t =
      ChatTemplate::parse(read_file(source_dir() + "/tests/data/chat/smollm2_template.jinja"));
  const ChatTemplate copy = t;
  const std::vector<ChatMessage> m = {{"user", "Hi", {}}};
  EXPECT_EQ(t.render(m, true, "", ""), copy.render(m, true, "", ""));
  EXPECT_EQ(t.render(m, false, "", ""),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

}  // namespace
}  // namespace detllm
