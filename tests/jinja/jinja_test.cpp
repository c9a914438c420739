// The Jinja library (detllm_jinja, jinja/jinja.h) on its own: exact equality with jinja2 on
// small templates covering the language (goldens: the "snippets" of tests/data/chat/golden.json,
// from scripts/ref/chat_template_golden.py), then what no reference can check: error positions,
// and the limits that stop hostile templates. Links detllm_jinja only.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "core/error.h"
#include "jinja/jinja.h"

namespace detllm {
namespace {

using ordered_json = nlohmann::ordered_json;
using json = nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ordered_json& golden() {
  static const ordered_json g = ordered_json::parse(
      read_file(std::string(DETLLM_SOURCE_DIR) + "/tests/data/chat/golden.json"));
  return g;
}

std::string show(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Renders `source` with `context`; returns the output, or "PARSE ERROR: ..." / "RENDER ERROR:
// ..." by where it failed.
std::string render_snippet(const std::string& source, const ordered_json& context) {
  std::optional<jinja::Template> tpl;
  try {
    tpl = jinja::Template::parse(source);
  } catch (const Error& e) {
    return std::string("PARSE ERROR: ") + e.what();
  }
  try {
    return tpl->render(context);
  } catch (const Error& e) {
    return std::string("RENDER ERROR: ") + e.what();
  }
}

TEST(JinjaGolden, LanguageMatchesJinja2) {
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
    jinja::Template::parse(source).render(context);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << show(source);
  return "";
}

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
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

TEST(JinjaErrors, RuntimeErrorsNameLineAndColumn) {
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
    jinja::Template::parse(source, small_limits()).render(ordered_json::object());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JinjaLimits, DeepNestingIsRejectedNotCrashing) {
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
  EXPECT_EQ(jinja::Template::parse(flat).render(ordered_json::object()).size(), 4000u);
}

TEST(JinjaLimits, RunawayRenderingStops) {
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

TEST(JinjaLimits, SelfReferencesDoNotLeakOrHang) {
  // A namespace holding itself, a loop remembering itself: rendered, printed, freed (ASan
  // builds would report a leak).
  const std::string out =
      jinja::Template::parse(
          "{% set ns = namespace() %}{% set ns.me = ns %}{% for x in [1] %}{{ loop.changed(loop) }}"
          "{% set ns.loop = loop %}{% endfor %}{{ ns.me.me is defined }}")
          .render(ordered_json::object());
  EXPECT_EQ(out, "TrueTrue");
  EXPECT_EQ(jinja::Template::parse("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}")
                .render(ordered_json::object()),
            "<Namespace {'a': 1, 'me': <Namespace {...}>}>");
}

}  // namespace
}  // namespace detllm
