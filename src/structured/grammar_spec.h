// GrammarSpec: what a constrained request asks its output to match (docs/structured_output.md).
// One plain value per OpenAI/vLLM form: response_format json_schema (strict or not) and
// json_object, vLLM guided_json / guided_regex / guided_choice / guided_grammar (EBNF), and
// structural tags (tool calling, later). compile() (compiler.h) turns it into a CompiledGrammar
// for one vocabulary.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace detllm::structured {

struct GrammarSpec {
  enum class Kind {
    kJsonSchema,     // text: a JSON Schema document
    kJsonObject,     // any JSON object (response_format {"type": "json_object"})
    kRegex,          // text: a regular expression the whole output must match
    kChoice,         // choices: the output is exactly one of them
    kEbnf,           // text: a GBNF-style EBNF grammar whose root rule is `root`
    kStructuralTag,  // text: xgrammar's structural-tag JSON (no request field makes one yet)
  };
  Kind kind = Kind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;
  // kJsonSchema: strict (OpenAI "strict": true) forbids properties and items the schema does
  // not name; not strict allows them where the schema does not say otherwise.
  bool strict = true;

  static GrammarSpec json_schema(std::string schema, bool strict = true) {
    return {Kind::kJsonSchema, std::move(schema), {}, strict};
  }
  static GrammarSpec json_object() { return {Kind::kJsonObject, {}, {}, false}; }
  static GrammarSpec regex(std::string pattern) { return {Kind::kRegex, std::move(pattern), {}}; }
  static GrammarSpec choice(std::vector<std::string> options) {
    return {Kind::kChoice, {}, std::move(options)};
  }
  static GrammarSpec ebnf(std::string grammar) { return {Kind::kEbnf, std::move(grammar), {}}; }
  static GrammarSpec structural_tag(std::string json) {
    return {Kind::kStructuralTag, std::move(json), {}};
  }
};

// "json_schema", "regex", ... (for messages).
const char* kind_name(GrammarSpec::Kind kind);

}  // namespace detllm::structured
