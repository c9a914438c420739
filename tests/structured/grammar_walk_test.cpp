// Random walks through the masks of a JSON schema, a regex and a choice list (SmolLM2's
// vocabulary): every walk ends, and its text satisfies what was asked. A negative control: the
// same checks refuse text drawn without the mask.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <regex>

#include "grammar_fixture.h"

namespace detllm::test {
namespace {

using structured::GrammarSpec;
using structured::Matcher;

constexpr const char* kPersonSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "member": {"type": "boolean"},
    "color": {"enum": ["red", "green", "blue"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3}
  },
  "required": ["name", "age", "member", "color"]
})";

// What the schema asks of the fields our checks look at; "" when satisfied.
std::string person_problem(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return std::string("not JSON: ") + e.what();
  }
  if (!j.is_object()) return "not an object";
  for (const char* key : {"name", "age", "member", "color"}) {
    if (!j.contains(key)) return std::string("missing ") + key;
  }
  if (!j["name"].is_string() || j["name"].get<std::string>().empty()) return "name";
  if (!j["age"].is_number_integer() || j["age"].get<int64_t>() < 0 || j["age"].get<int64_t>() > 150)
    return "age";
  if (!j["member"].is_boolean()) return "member";
  const auto c = j["color"];
  if (!c.is_string() || (c != "red" && c != "green" && c != "blue")) return "color";
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "name" && it.key() != "age" && it.key() != "member" && it.key() != "color" &&
        it.key() != "tags")
      return "extra property " + it.key();  // strict: no properties the schema does not name
  }
  return "";
}

TEST(GrammarWalk, JsonSchemaWalksEndInValidJson) {
  DETLLM_GRAMMAR_ENV(env);
  const auto g = env->compiler->compile(GrammarSpec::json_schema(kPersonSchema));
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Matcher m(g);
    const Walk w = random_walk(*env, m, seed);
    ASSERT_TRUE(w.terminated) << "seed " << seed << ": " << walk_text(*env->tokenizer, w);
    EXPECT_EQ(w.tokens.back(), *env->tokenizer->eos_id());
    const std::string text = walk_text(*env->tokenizer, w);
    EXPECT_EQ(person_problem(text), "") << "seed " << seed << ": " << text;
  }
}

TEST(GrammarWalk, JsonObjectWalksEndInAnObject) {
  DETLLM_GRAMMAR_ENV(env);
  const auto g = env->compiler->compile(GrammarSpec::json_object());
  int ended = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Matcher m(g);
    const Walk w = random_walk(*env, m, seed, 200);
    if (!w.terminated) continue;  // free-form JSON may nest deeper than 200 tokens
    ++ended;
    const std::string text = walk_text(*env->tokenizer, w);
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << text;
    EXPECT_TRUE(j.is_object()) << text;
  }
  EXPECT_GT(ended, 0);
}

TEST(GrammarWalk, RegexWalksMatch) {
  DETLLM_GRAMMAR_ENV(env);
  const std::string pattern = "[a-z]{2,5}-[0-9]{2,3}( (ok|fail))?";
  const auto g = env->compiler->compile(GrammarSpec::regex(pattern));
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Matcher m(g);
    const Walk w = random_walk(*env, m, seed);
    ASSERT_TRUE(w.terminated) << "seed " << seed;
    const std::string text = walk_text(*env->tokenizer, w);
    EXPECT_TRUE(std::regex_match(text, std::regex(pattern))) << text;
  }
}

TEST(GrammarWalk, ChoiceWalksGiveAChoice) {
  DETLLM_GRAMMAR_ENV(env);
  const std::vector<std::string> options = {"red", "green", "blue", "dark \"red\"", "naïve"};
  const auto g = env->compiler->compile(GrammarSpec::choice(options));
  std::set<std::string> seen;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    Matcher m(g);
    const Walk w = random_walk(*env, m, seed);
    ASSERT_TRUE(w.terminated) << "seed " << seed;
    const std::string text = walk_text(*env->tokenizer, w);
    EXPECT_NE(std::find(options.begin(), options.end(), text), options.end()) << text;
    seen.insert(text);
  }
  EXPECT_GE(seen.size(), 3u);
}

TEST(GrammarWalk, EbnfWalksMatch) {
  DETLLM_GRAMMAR_ENV(env);
  const auto g = env->compiler->compile(GrammarSpec::ebnf(
      "root ::= \"(\" num (\",\" num)* \")\"\nnum ::= [1-9] [0-9]?\n"));
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Matcher m(g);
    const Walk w = random_walk(*env, m, seed);
    ASSERT_TRUE(w.terminated) << "seed " << seed;
    const std::string text = walk_text(*env->tokenizer, w);
    EXPECT_TRUE(std::regex_match(text, std::regex(R"(\([1-9][0-9]?(,[1-9][0-9]?)*\))"))) << text;
  }
}

// Negative control: tokens drawn without the mask fail the same checks (so they can fail).
TEST(GrammarWalk, UnmaskedTextFailsTheChecks) {
  DETLLM_GRAMMAR_ENV(env);
  std::mt19937_64 rng(7);
  std::vector<int32_t> ids;
  for (int k = 0; k < 20; ++k)
    ids.push_back(std::uniform_int_distribution<int32_t>(0, env->tokenizer->vocab_size() - 1)(rng));
  const std::string text = env->tokenizer->decode(ids);
  EXPECT_NE(person_problem(text), "") << text;
  EXPECT_NE(person_problem(R"({"name": "x", "age": 151, "member": true, "color": "red"})"), "");
  EXPECT_NE(person_problem(R"({"name": "x", "age": 3, "member": true, "color": "red", "z": 1})"),
            "");
  EXPECT_EQ(person_problem(R"({"name": "x", "age": 3, "member": true, "color": "red"})"), "");
  // And the matcher refuses such tokens: the first one its mask does not allow.
  const auto g = env->compiler->compile(GrammarSpec::json_schema(kPersonSchema));
  EXPECT_THROW(Matcher::from_tokens(g, ids), structured::GrammarError);
}

}  // namespace
}  // namespace detllm::test
