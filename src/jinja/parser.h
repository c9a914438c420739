// Jinja parser: tokens -> syntax tree (ast.h), following jinja2's grammar and operator
// precedence (filters bind tighter than arithmetic, `not` looser than comparisons). Syntax
// errors name line and column and say what was expected.
#pragma once

#include <string_view>

#include "jinja/ast.h"

namespace detllm::jinja {

// Parses template source (normalized here; see normalize_source). Throws detllm::Error with
// line and column on any syntax error or unsupported construct (include, extends, import,
// call blocks, recursive loops).
Program parse(std::string_view source);

}  // namespace detllm::jinja
