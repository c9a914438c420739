// Jinja builtins other than filters and methods (see builtins.h): argument binding, the tests
// (`is defined`, `is string`...) and the globals transformers installs (range, dict,
// namespace, raise_exception, strftime_now).
#include "jinja/builtins.h"

#include <algorithm>
#include <ctime>
#include <unordered_map>

#include "jinja/evaluator.h"
#include "jinja/ops.h"
#include "jinja/text.h"

namespace detllm::jinja {

// ---- Params ----------------------------------------------------------------------------

Params::Params(const CallArgs& args, std::string_view function,
               std::initializer_list<const char*> names)
    : function_(function), names_(names), values_(names.size(), nullptr) {
  if (args.positional.size() > names_.size()) {
    fail("{}() takes at most {} argument(s) ({} given)", function, names_.size(),
         args.positional.size());
  }
  for (size_t i = 0; i < args.positional.size(); ++i) values_[i] = &args.positional[i];
  for (const auto& kw : args.keyword) {
    const std::string& key = kw.first;
    const auto it =
        std::find_if(names_.begin(), names_.end(), [&](const char* n) { return key == n; });
    if (it == names_.end()) fail("{}() got an unexpected keyword argument '{}'", function, key);
    const auto i = static_cast<size_t>(it - names_.begin());
    if (values_[i]) fail("{}() got multiple values for argument '{}'", function, key);
    values_[i] = &kw.second;
  }
}

int64_t Params::get_int(size_t i, int64_t fallback) const {
  const Value* v = values_[i];
  if (!v || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool()) {
    fail("{}(): argument '{}' must be an integer, not {}", function_, names_[i], type_name(*v));
  }
  return v->as_int();
}

bool Params::get_bool(size_t i, bool fallback) const {
  return values_[i] ? truthy(*values_[i]) : fallback;
}

std::optional<std::string> Params::get_string(size_t i) const {
  const Value* v = values_[i];
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) {
    fail("{}(): argument '{}' must be a string or none, not {}", function_, names_[i],
         type_name(*v));
  }
  return v->as_string();
}

namespace {

// ---- tests -----------------------------------------------------------------------------

// The single argument of a test (`is divisibleby 3`, `is sameas x`).
const Value& test_argument(const char* name, CallArgs& args) {
  Params p(args, name, {"other"});
  if (!p.has(0)) fail("test '{}' needs an argument", name);
  return *p.get(0);
}

bool test_defined(Evaluator&, const Value& v, CallArgs&) {
  return !v.is_undefined();
}
bool test_undefined(Evaluator&, const Value& v, CallArgs&) {
  return v.is_undefined();
}
bool test_none(Evaluator&, const Value& v, CallArgs&) {
  return v.is_none();
}
bool test_boolean(Evaluator&, const Value& v, CallArgs&) {
  return v.is_bool();
}
bool test_true(Evaluator&, const Value& v, CallArgs&) {
  return v.is_bool() && v.as_bool();
}
bool test_false(Evaluator&, const Value& v, CallArgs&) {
  return v.is_bool() && !v.as_bool();
}
bool test_integer(Evaluator&, const Value& v, CallArgs&) {
  return v.is_int();
}
bool test_float(Evaluator&, const Value& v, CallArgs&) {
  return v.is_float();
}
bool test_number(Evaluator&, const Value& v, CallArgs&) {
  return v.is_number();
}
bool test_string(Evaluator&, const Value& v, CallArgs&) {
  return v.is_string();
}
bool test_mapping(Evaluator&, const Value& v, CallArgs&) {
  return v.is_dict();
}
bool test_escaped(Evaluator&, const Value&, CallArgs&) {
  return false;
}
bool test_callable(Evaluator&, const Value& v, CallArgs&) {
  return v.is_function() || v.is_undefined() || v.is_loop();  // Undefined defines __call__
}
bool test_iterable(Evaluator&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined() || v.is_loop();
}
bool test_sequence(Evaluator&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}
bool test_lower(Evaluator& ev, const Value& v, CallArgs&) {
  return text::predicate(to_str(v, ev.limits().max_output_bytes), "islower");
}
bool test_upper(Evaluator& ev, const Value& v, CallArgs&) {
  return text::predicate(to_str(v, ev.limits().max_output_bytes), "isupper");
}
bool mod_equals(const Value& v, const Value& divisor, int64_t remainder) {
  return equals(binary(BinaryOp::kMod, v, divisor, 0), Value::integer(remainder));
}
bool test_odd(Evaluator&, const Value& v, CallArgs&) {
  return mod_equals(v, Value::integer(2), 1);
}
bool test_even(Evaluator&, const Value& v, CallArgs&) {
  return mod_equals(v, Value::integer(2), 0);
}
bool test_divisibleby(Evaluator&, const Value& v, CallArgs& args) {
  return mod_equals(v, test_argument("divisibleby", args), 0);
}
bool test_filter(Evaluator&, const Value& v, CallArgs&) {
  return v.is_string() && filter_exists(v.as_string());
}
bool test_test(Evaluator&, const Value& v, CallArgs&) {
  return v.is_string() && find_test(v.as_string()) != nullptr;
}
bool test_sameas(Evaluator&, const Value& v, CallArgs& args) {
  const Value& o = test_argument("sameas", args);
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kNone:
    case Value::Kind::kUndefined:
      return v.is_none();
    case Value::Kind::kBool:
      return v.as_bool() == o.as_bool();
    case Value::Kind::kInt:  // CPython caches small ints
      return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return &v.as_list() == &o.as_list();
    case Value::Kind::kDict:
      return &v.as_dict() == &o.as_dict();
    case Value::Kind::kNamespace:
    case Value::Kind::kFunction:
    case Value::Kind::kLoop:
      return equals(v, o);
    default:
      return false;
  }
}

template <CompareOp op>
bool test_compare(Evaluator&, const Value& v, CallArgs& args) {
  return compare(op, v, test_argument(op_symbol(op), args));
}

bool test_in(Evaluator&, const Value& v, CallArgs& args) {
  return contains(test_argument("in", args), v);
}

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", test_defined},
      {"undefined", test_undefined},
      {"none", test_none},
      {"boolean", test_boolean},
      {"true", test_true},
      {"false", test_false},
      {"integer", test_integer},
      {"float", test_float},
      {"number", test_number},
      {"string", test_string},
      {"mapping", test_mapping},
      {"escaped", test_escaped},
      {"callable", test_callable},
      {"iterable", test_iterable},
      {"sequence", test_sequence},
      {"lower", test_lower},
      {"upper", test_upper},
      {"odd", test_odd},
      {"even", test_even},
      {"divisibleby", test_divisibleby},
      {"filter", test_filter},
      {"test", test_test},
      {"sameas", test_sameas},
      {"in", test_in},
      {"==", test_compare<CompareOp::kEq>},
      {"eq", test_compare<CompareOp::kEq>},
      {"equalto", test_compare<CompareOp::kEq>},
      {"!=", test_compare<CompareOp::kNe>},
      {"ne", test_compare<CompareOp::kNe>},
      {">", test_compare<CompareOp::kGt>},
      {"gt", test_compare<CompareOp::kGt>},
      {"greaterthan", test_compare<CompareOp::kGt>},
      {">=", test_compare<CompareOp::kGe>},
      {"ge", test_compare<CompareOp::kGe>},
      {"<", test_compare<CompareOp::kLt>},
      {"lt", test_compare<CompareOp::kLt>},
      {"lessthan", test_compare<CompareOp::kLt>},
      {"<=", test_compare<CompareOp::kLe>},
      {"le", test_compare<CompareOp::kLe>},
  };
  return table;
}

// ---- globals ---------------------------------------------------------------------------

Value global_range(Evaluator& ev, CallArgs& args) {
  if (!args.keyword.empty()) fail("range() takes no keyword arguments");
  const auto& a = args.positional;
  if (a.empty() || a.size() > 3) fail("range expected 1 to 3 arguments, got {}", a.size());
  for (const Value& v : a) {
    if (!v.is_int() && !v.is_bool()) {
      fail("'{}' object cannot be interpreted as an integer", type_name(v));
    }
  }
  const int64_t start = a.size() == 1 ? 0 : a[0].as_int();
  const int64_t stop = a.size() == 1 ? a[0].as_int() : a[1].as_int();
  const int64_t step = a.size() == 3 ? a[2].as_int() : 1;
  if (step == 0) fail("range() arg 3 must not be zero");
  // Length as Python computes it, in wide arithmetic so huge bounds cannot overflow.
  const __int128 span = step > 0 ? (__int128)stop - start : (__int128)start - stop;
  const __int128 mag = step > 0 ? step : -(__int128)step;
  const __int128 n = span <= 0 ? 0 : (span + mag - 1) / mag;
  if (n > ev.limits().max_range) {
    fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).",
         ev.limits().max_range);
  }
  ev.charge(static_cast<uint64_t>(n));
  List items;
  items.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i)
    items.push_back(Value::integer(start + i * step));
  return Value::list(std::move(items));
}

// dict(mapping_or_pairs, **kwargs) as Python builds it.
Dict build_dict(Evaluator& ev, CallArgs& args, const char* fn) {
  if (args.positional.size() > 1) {
    fail("{} expected at most 1 positional argument, got {}", fn, args.positional.size());
  }
  Dict d;
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      d = src.as_dict();
    } else if (src.is_namespace()) {
      d = src.as_namespace().attrs;
    } else {
      const List pairs = iterate(src);
      ev.charge(pairs.size());
      for (size_t i = 0; i < pairs.size(); ++i) {
        const Value& pair = pairs[i];
        const List kv = (pair.is_sequence() || pair.is_string()) ? iterate(pair) : List{};
        if (kv.size() != 2) {
          fail("{}: sequence element #{} has length {}; 2 is required", fn, i, kv.size());
        }
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [key, value] : args.keyword) d.set(Value::string(key), value);
  return d;
}

Value global_dict(Evaluator& ev, CallArgs& args) {
  return Value::dict(build_dict(ev, args, "dict"));
}

Value global_namespace(Evaluator& ev, CallArgs& args) {
  const Dict d = build_dict(ev, args, "namespace");
  auto ns = std::make_shared<Namespace>();
  for (const auto& [key, value] : d.items()) {
    if (key.is_string() && !key.as_string().empty() && key.as_string()[0] == '_') {
      fail(
          "chat templates cannot store underscore-prefixed attributes on a namespace, but got "
          "'{}'; rename the attribute",
          key.as_string());
    }
    if (!key.is_string()) fail("namespace attribute names must be strings");
    ns->set(key.as_string(), value);
  }
  ev.track(ns);
  return Value::ns(std::move(ns));
}

Value global_raise_exception(Evaluator& ev, CallArgs& args) {
  Params p(args, "raise_exception", {"message"});
  const std::string message = p.has(0) ? to_str(*p.get(0), ev.limits().max_output_bytes) : "";
  fail("raise_exception: {}", message);
}

Value global_strftime_now(Evaluator&, CallArgs& args) {
  Params p(args, "strftime_now", {"format"});
  const std::optional<std::string> format = p.get_string(0);
  if (!format) fail("strftime_now() needs a format string");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  const size_t n = std::strftime(buf, sizeof buf, format->c_str(), &local);
  if (n == 0 && !format->empty()) fail("strftime_now: format too long or invalid");
  return Value::string(std::string(buf, n));
}

Value global_joiner(Evaluator&, CallArgs& args) {
  Params p(args, "joiner", {"sep"});
  const std::string sep = p.get_string(0).value_or(", ");
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [sep, used](Evaluator&, CallArgs&) -> Value {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

}  // namespace

TestFn find_test(std::string_view name) {
  const auto& table = tests();
  const auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

Dict make_globals() {
  Dict g;
  g.set(Value::string("range"), Value::function("range", global_range));
  g.set(Value::string("dict"), Value::function("dict", global_dict));
  g.set(Value::string("namespace"), Value::function("namespace", global_namespace));
  g.set(Value::string("raise_exception"),
        Value::function("raise_exception", global_raise_exception));
  g.set(Value::string("strftime_now"), Value::function("strftime_now", global_strftime_now));
  g.set(Value::string("joiner"), Value::function("joiner", global_joiner));
  return g;
}

}  // namespace detllm::jinja
