// Structured-output flags (see structured_flags.h).
#include "cli/structured_flags.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace detllm::cli {
namespace {

// "@path" -> the file's text; anything else is the text itself.
std::string text_or_file(const std::string& value, const char* flag) {
  if (value.empty() || value[0] != '@') return value;
  std::ifstream in(value.substr(1), std::ios::binary);
  check(in.good(), "{}: cannot read the file '{}'", flag, value.substr(1));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

void add_structured_options(CLI::App& cmd, StructuredFlags& flags) {
  cmd.add_option("--json-schema", flags.json_schema,
                 "Constrain the output to JSON matching this schema (JSON text, or @FILE);\n"
                 "as the server's response_format json_schema with strict");
  cmd.add_flag("--json-object", flags.json_object,
               "Constrain the output to a JSON object (response_format json_object)");
  cmd.add_option("--regex", flags.regex,
                 "Constrain the output to match this regular expression (guided_regex)");
  cmd.add_option("--choice", flags.choices,
                 "Constrain the output to exactly one of these strings (repeat the flag;\n"
                 "guided_choice)");
  cmd.add_option("--grammar", flags.grammar,
                 "Constrain the output to this EBNF grammar, root rule `root` (text or @FILE;\n"
                 "guided_grammar)");
}

std::optional<structured::GrammarSpec> grammar_spec_of(const StructuredFlags& f) {
  std::vector<structured::GrammarSpec> specs;
  if (!f.json_schema.empty()) {
    specs.push_back(structured::GrammarSpec::json_schema(text_or_file(f.json_schema,
                                                                      "--json-schema")));
  }
  if (f.json_object) specs.push_back(structured::GrammarSpec::json_object());
  if (!f.regex.empty()) specs.push_back(structured::GrammarSpec::regex(f.regex));
  if (!f.choices.empty()) specs.push_back(structured::GrammarSpec::choice(f.choices));
  if (!f.grammar.empty()) {
    specs.push_back(structured::GrammarSpec::ebnf(text_or_file(f.grammar, "--grammar")));
  }
  check(specs.size() <= 1,
        "give at most one of --json-schema, --json-object, --regex, --choice and --grammar");
  if (specs.empty()) return std::nullopt;
  return specs.front();
}

}  // namespace detllm::cli
