// The Jinja library's public header (detllm_jinja): a Jinja-subset interpreter that renders
// chat templates byte for byte as jinja2 does (with trim_blocks and lstrip_blocks, as
// transformers' apply_chat_template sets them). Code outside src/jinja/ includes this header
// only (scripts/check_layers.py checks it); the context's types, Value / Dict / List, are those
// of jinja/value.h, which it includes.
//
// Covered: if/elif/else, for (loop.*, else, filters, break/continue), set (also block and
// namespace attributes), macro, with, filter blocks, raw, comments, whitespace control, jinja2's
// filters and tests, str/dict/list methods, and transformers' globals (raise_exception,
// namespace, strftime_now, tojson...). Refused with a clear error: include, extends, import,
// call blocks, recursive loops, and a few rarely used filters (truncate, groupby...).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "jinja/value.h"

namespace detllm::jinja {

struct Program;

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // rendered text, and any one string built
  uint64_t max_steps = 50'000'000;  // evaluation steps: nodes, loop iterations, builtin work
  int max_depth = 600;              // nested evaluation (macro recursion included)
  int64_t max_range = 100'000;      // range() length; jinja2's sandbox uses the same limit
};

// A parsed template: immutable; render() is const and thread-safe, copies share the program.
class Template {
 public:
  // Parses `source` (newlines normalized to \n, one trailing newline dropped, as jinja2 does)
  // and checks that every filter and test it names exists, as jinja2 does when it compiles.
  // Throws detllm::Error with line and column on syntax errors, unknown filters/tests and
  // unsupported tags.
  static Template parse(std::string_view source, const RenderLimits& limits = RenderLimits{});

  // Renders with exactly the variables of `context` (over the globals). Throws detllm::Error
  // naming line and column when the template fails or calls raise_exception.
  std::string render(const Dict& context) const;
  // The same with a JSON object as the context (key order is kept, which matters for `tojson`
  // and for iterating dicts).
  std::string render(const nlohmann::ordered_json& context) const;

  const std::string& source() const;  // normalized
  const RenderLimits& limits() const { return limits_; }

 private:
  std::shared_ptr<const Program> program_;
  RenderLimits limits_;
};

}  // namespace detllm::jinja
