// The Jinja builtins chat templates use: filters (| trim, | tojson ...), tests (is defined ...),
// methods of str/dict/list ('x'.startswith(...), d.items() ...) and globals (range, namespace,
// raise_exception ...), each behaving as jinja2 3.1 in transformers' sandbox defines it.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/value.h"

namespace detllm::jinja {

using FilterFn = Value (*)(Evaluator& ev, const Value& input, CallArgs& args);
using TestFn = bool (*)(Evaluator& ev, const Value& subject, CallArgs& args);

FilterFn find_filter(std::string_view name);  // nullptr when there is no such filter
// Whether jinja2 knows the filter (supported or not): unknown names fail at parse time.
bool filter_exists(std::string_view name);
TestFn find_test(std::string_view name);  // nullptr when there is no such test

// An attribute of a builtin object (a bound method of str, dict or list), or nullopt when the
// object has no such attribute. Mutating methods (list.append, dict.update ...) come back as
// functions that fail, as jinja2's ImmutableSandboxedEnvironment refuses them.
std::optional<Value> find_method(const Value& obj, const std::string& name);

// The globals transformers gives a chat template: range, dict, namespace, raise_exception,
// strftime_now (the one nondeterministic input: the current local time).
Dict make_globals();

// Python-style binding of call arguments to named parameters.
class Params {
 public:
  // Throws Failure for unexpected keywords, a parameter given twice and extra positionals.
  Params(const CallArgs& args, std::string_view function, std::initializer_list<const char*> names);
  const Value* get(size_t i) const { return values_[i]; }  // nullptr when not given
  Value get_or(size_t i, Value fallback) const { return values_[i] ? *values_[i] : fallback; }
  bool has(size_t i) const { return values_[i] != nullptr; }
  // Typed accessors; Failure naming the parameter when the type is wrong.
  int64_t get_int(size_t i, int64_t fallback) const;
  bool get_bool(size_t i, bool fallback) const;           // any value, by truthiness
  std::optional<std::string> get_string(size_t i) const;  // nullopt when absent or none

 private:
  std::string_view function_;
  std::vector<const char*> names_;
  std::vector<const Value*> values_;
};

}  // namespace detllm::jinja
