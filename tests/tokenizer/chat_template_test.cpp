// Chat templates: exact equality with transformers/jinja2 on the real templates (Llama-2-chat,
// Llama-3, Qwen3, SmolLM2) x conversations, and on small templates covering the Jinja language
// (goldens: tests/data/chat/golden.json from scripts/ref/chat_template_golden.py). Then what no
// reference can check: error positions, and the limits that stop hostile templates.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
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

// Renders `source` with `context`; returns the output, or "PARSE ERROR: ..." / "RENDER ERROR:
// ..." by where it failed.
std::string render_snippet(const std::string& source, const ordered_json& context) {
  std::optional<ChatTemplate> tpl;
  try {
    tpl = ChatTemplate::parse(source);
  } catch (const Error& e) {
    return std::string("PARSE ERROR: ") + e.what();
  }
  try {
    return tpl->render_context(context);
  } catch (const Error& e) {
    return std::string("RENDER ERROR: ") + e.what();
  }
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

TEST(ChatTemplateGolden, LanguageMatchesJinja2) {
  for (const auto& s : golden().at("snippets")) {
    const std::string name = s.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const std::string got = render_snippet(s.at("template").get<std::string>(), s.at("context"));
    if (s.contains("error")) {
      // jinja2 rejects syntax and unknown filters/tests when compiling, the rest when rendering.
      const std::string error = s.at("error").get<std::string>();
      const bool at_compile = error.rfind("TemplateSyntaxError", 0) == 0 ||
                              error.rfind("TemplateAssertionError", 0) == 0;
      const std::string want = at_compile ? "PARSE ERROR: " : "RENDER ERROR: ";
      EXPECT_TRUE(got.rfind(want, 0) == 0)
          << "jinja2 raised " << error << "\nwe gave " << show(got);
    } else {
      const std::string want = s.at("output").get<std::string>();
      EXPECT_EQ(got, want) << "got      " << show(got) << "\nexpected " << show(want);
    }
  }
}

// ---- errors name line and column ---------------------------------------------------------

std::string error_of(const std::string& source,
                     const ordered_json& context = ordered_json::object()) {
  try {
    ChatTemplate::parse(source).render_context(context);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << show(source);
  return "";
}

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_NE(error_of("line one\n  {{ 1 +* 2 }}").find("line 2, column 9"), std::string::npos)
      << error_of("line one\n  {{ 1 +* 2 }}");
  const std::string unclosed = error_of("{% for m in messages %}\n{% if m %}x{% endif %}\n");
  EXPECT_NE(unclosed.find("'endfor'"), std::string::npos) << unclosed;
  EXPECT_NE(unclosed.find("opened at line 1, column 4"), std::string::npos) << unclosed;
  const std::string str = error_of("ab\n\n  é {{ 'oops }}");
  EXPECT_NE(str.find("line 3, column 8"), std::string::npos) << str;
  EXPECT_NE(str.find("unterminated string"), std::string::npos) << str;
  EXPECT_NE(error_of("{{ x|nofilter }}").find("no filter named 'nofilter'"), std::string::npos);
  EXPECT_NE(error_of("{% include 'x.j2' %}").find("not supported"), std::string::npos);
  EXPECT_NE(error_of("{% for x in y recursive %}{% endfor %}").find("recursive"),
            std::string::npos);
  EXPECT_NE(error_of("{# never").find("line 1, column 1"), std::string::npos);
}

TEST(ChatTemplateErrors, RuntimeErrorsNameLineAndColumn) {
  const std::string e = error_of("ok\n{{ 'a' ~ raise_exception('roles must alternate') }}");
  EXPECT_NE(e.find("line 2, column 10"), std::string::npos) << e;
  EXPECT_NE(e.find("roles must alternate"), std::string::npos) << e;
  const std::string u =
      error_of("{{ messages[0].role.upper() }}", {{"messages", ordered_json::array()}});
  EXPECT_NE(u.find("line 1, column"), std::string::npos) << u;
  EXPECT_NE(u.find("has no element 0"), std::string::npos) << u;
}

// ---- limits against hostile templates ------------------------------------------------------

jinja::RenderLimits small_limits() {
  jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_steps = 200'000;
  return limits;
}

std::string limited_error(const std::string& source) {
  try {
    ChatTemplate::parse(source, small_limits()).render_context(ordered_json::object());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplateLimits, DeepNestingIsRejectedNotCrashing) {
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                .find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}")
                .find("nested too deeply"),
            std::string::npos);
  std::string blocks;
  for (int i = 0; i < 500; ++i) blocks += "{% if true %}";
  EXPECT_NE(error_of(blocks).find("nested too deeply"), std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_NE(error_of(chain + " }}").find("nested too deeply"), std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '-') + "1 }}").find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " +
                     [] {
                       std::string s;
                       for (int i = 0; i < 3000; ++i) s += "not ";
                       return s;
                     }() +
                     "1 }}")
                .find("nested too deeply"),
            std::string::npos);
  // Long flat templates are fine.
  std::string flat;
  for (int i = 0; i < 2000; ++i) flat += "{{ 'x' }}{% if true %}y{% endif %}";
  EXPECT_EQ(ChatTemplate::parse(flat).render_context(ordered_json::object()).size(), 4000u);
}

TEST(ChatTemplateLimits, RunawayRenderingStops) {
  EXPECT_NE(limited_error(
                "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
                .find("evaluation steps"),
            std::string::npos);
  EXPECT_NE(limited_error("{% for i in range(10000) %}xxxxxxxxxx{% endfor %}").find("limit"),
            std::string::npos);
  EXPECT_NE(limited_error("{{ 'x' * 100000000000 }}").find("limit"), std::string::npos);
  EXPECT_NE(limited_error("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                          "{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .find("limit"),
            std::string::npos);
  EXPECT_NE(
      limited_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("nested deeper"),
      std::string::npos);
  EXPECT_NE(limited_error(
                "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                "{{ f(60) }}")
                .find("evaluation steps"),
            std::string::npos);
  EXPECT_NE(limited_error("{{ range(10**9)|length }}").find("MAX_RANGE"), std::string::npos);
  EXPECT_NE(limited_error(
                "{% set ns = namespace(x=[1]) %}{% for i in range(300) %}{% set ns.x = [ns.x] %}"
                "{% endfor %}")
                .find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(limited_error("{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(80) %}"
                          "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}"
                          "{{ ns.a == ns.b }}")
                .find("too large"),
            std::string::npos);
  EXPECT_NE(limited_error("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
}

TEST(ChatTemplateLimits, SelfReferencesDoNotLeakOrHang) {
  // A namespace holding itself, a loop remembering itself: rendered, printed, freed (ASan
  // builds would report a leak).
  const std::string out =
      ChatTemplate::parse(
          "{% set ns = namespace() %}{% set ns.me = ns %}{% for x in [1] %}{{ loop.changed(loop) }}"
          "{% set ns.loop = loop %}{% endfor %}{{ ns.me.me is defined }}")
          .render_context(ordered_json::object());
  EXPECT_EQ(out, "TrueTrue");
  EXPECT_EQ(ChatTemplate::parse("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}")
                .render_context(ordered_json::object()),
            "<Namespace {'a': 1, 'me': <Namespace {...}>}>");
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
