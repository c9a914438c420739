// The structured-output flags of `detllm generate` (--json-schema, --json-object, --regex,
// --choice, --grammar): the server's response_format / guided_* fields (docs/server.md,
// "Structured output") as command-line options, compiled by the same grammar engine, so a
// request made with these flags samples the same tokens as the same request over HTTP.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "structured/grammar_spec.h"

namespace detllm::cli {

struct StructuredFlags {
  std::string json_schema;  // a JSON schema, or @FILE
  bool json_object = false;
  std::string regex;
  std::vector<std::string> choices;
  std::string grammar;  // EBNF, or @FILE
};

void add_structured_options(CLI::App& cmd, StructuredFlags& flags);
// The one grammar the flags ask for (none when no flag is given); detllm::Error when more than
// one is given or a @FILE cannot be read.
std::optional<structured::GrammarSpec> grammar_spec_of(const StructuredFlags& flags);

}  // namespace detllm::cli
