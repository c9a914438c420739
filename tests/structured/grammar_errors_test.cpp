// Invalid specs are GrammarErrors whose text names the kind, the problem and, where known, the
// place; limits are enforced; random and mutated schemas give a clean error or a grammar, never
// a crash or another exception.
#include <gtest/gtest.h>

#include <random>

#include "grammar_fixture.h"

namespace detllm::test {
namespace {

using structured::CompileLimits;
using structured::GrammarError;
using structured::GrammarSpec;

std::string error_of(const GrammarSpec& spec, const CompileLimits& limits = {}) {
  const GrammarEnv* env = grammar_env();
  try {
    env->compiler->compile(spec, limits);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "(compiled)";
}

void expect_error(const GrammarSpec& spec, std::initializer_list<const char*> parts) {
  const std::string e = error_of(spec);
  for (const char* p : parts) EXPECT_NE(e.find(p), std::string::npos) << "'" << p << "' in: " << e;
}

TEST(GrammarErrors, JsonSchemaSyntaxNamesTheByte) {
  DETLLM_GRAMMAR_ENV(env);
  expect_error(GrammarSpec::json_schema(R"({"type": "object",})"), {"json_schema", "not valid JSON at byte 19"});
  expect_error(GrammarSpec::json_schema("[1, 2]"), {"json_schema", "a schema is a JSON object", "array"});
  expect_error(GrammarSpec::json_schema(""), {"json_schema", "empty"});
  expect_error(GrammarSpec::json_schema("{\"a\": \"\xff\"}"), {"json_schema", "not valid UTF-8 at byte 7"});
}

TEST(GrammarErrors, JsonSchemaSemanticsNamesTheProblem) {
  DETLLM_GRAMMAR_ENV(env);
  const std::string e = error_of(GrammarSpec::json_schema(R"({"type": "frobnicate"})"));
  EXPECT_EQ(e.rfind("json_schema: ", 0), 0u) << e;
  EXPECT_NE(e.find("frobnicate"), std::string::npos) << e;
  const std::string r = error_of(GrammarSpec::json_schema(R"({"$ref": "#/$defs/missing"})"));
  EXPECT_EQ(r.rfind("json_schema: ", 0), 0u) << r;
  EXPECT_NE(r.find("missing"), std::string::npos) << r;
}

TEST(GrammarErrors, RegexNamesTheProblem) {
  DETLLM_GRAMMAR_ENV(env);
  const std::string e = error_of(GrammarSpec::regex("[a-"));
  EXPECT_EQ(e.rfind("regex: ", 0), 0u) << e;
  const std::string p = error_of(GrammarSpec::regex("(ab"));
  EXPECT_EQ(p.rfind("regex: ", 0), 0u) << p;
}

TEST(GrammarErrors, EbnfNamesTheRuleAndPlace) {
  DETLLM_GRAMMAR_ENV(env);
  const std::string e = error_of(GrammarSpec::ebnf("root ::= \"a\" undefined_rule\n"));
  EXPECT_EQ(e.rfind("grammar: ", 0), 0u) << e;
  EXPECT_NE(e.find("undefined_rule"), std::string::npos) << e;
  const std::string s = error_of(GrammarSpec::ebnf("root ::= (\"a\"\n"));
  EXPECT_EQ(s.rfind("grammar: ", 0), 0u) << s;
  const std::string n = error_of(GrammarSpec::ebnf("start ::= \"a\"\n"));
  EXPECT_NE(n.find("root"), std::string::npos) << n;
}

TEST(GrammarErrors, ChoiceAndLimits) {
  DETLLM_GRAMMAR_ENV(env);
  expect_error(GrammarSpec::choice({}), {"choice", "no choices"});
  expect_error(GrammarSpec::choice({"a", ""}), {"choice 1 is empty"});
  CompileLimits small;
  small.max_text_bytes = 10;
  small.max_choices = 2;
  EXPECT_NE(error_of(GrammarSpec::regex("[a-z]{1,100}x"), small).find("more than the limit of 10"),
            std::string::npos);
  EXPECT_NE(error_of(GrammarSpec::choice({"a", "b", "c"}), small).find("3 choices"),
            std::string::npos);
  CompileLimits instant;
  instant.max_time = std::chrono::milliseconds(0);
  EXPECT_NE(error_of(GrammarSpec::regex("[a-z]{1,3000}[0-9]{1,3000}"), instant)
                .find("longer than the limit of 0 ms"),
            std::string::npos);
}

// Random bytes, and single-byte mutations of a valid schema, as schemas: each one compiles or
// is a GrammarError beginning "json_schema: ".
TEST(GrammarErrors, MalformedSchemasFailCleanly) {
  DETLLM_GRAMMAR_ENV(env);
  std::mt19937_64 rng(48);
  const std::string base =
      R"({"type":"object","properties":{"a":{"type":"integer","minimum":1},"b":{"type":"array","items":{"type":"string","pattern":"^[a-z]+$"}},"c":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/d"}]}},"required":["a"],"$defs":{"d":{"type":"number","maximum":5}}})";
  const std::string alphabet = "{}[]\":,0123456789abcdefghijklmnopqrstuvwxyz$#/^+*?.\\- ";
  int compiled = 0, refused = 0;
  auto run = [&](const std::string& schema) {
    try {
      env->compiler->compile(GrammarSpec::json_schema(schema, rng() % 2 == 0));
      ++compiled;
    } catch (const GrammarError& e) {
      ++refused;
      EXPECT_EQ(std::string(e.what()).rfind("json_schema: ", 0), 0u) << e.what();
    }
  };
  for (int k = 0; k < 100; ++k) {
    std::string s(std::uniform_int_distribution<size_t>(0, 64)(rng), '\0');
    for (char& c : s) c = static_cast<char>(rng());
    run(s);
  }
  for (int k = 0; k < 150; ++k) {
    std::string s = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % s.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: s[at] = c; break;
        case 1: s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        default: s.erase(at, 1); break;
      }
    }
    run(s);
  }
  EXPECT_GT(refused, 100);
  EXPECT_GT(compiled, 0);
}

}  // namespace
}  // namespace detllm::test
