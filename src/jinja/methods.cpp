// Methods of builtin objects that templates call: str (strip, split, startswith, format...),
// dict (items, get...) and list (index, count). Mutating methods are refused, as transformers'
// ImmutableSandboxedEnvironment refuses them. See builtins.h.
#include <algorithm>
#include <string>

#include "jinja/builtins.h"
#include "jinja/evaluator.h"
#include "jinja/ops.h"
#include "jinja/text.h"

namespace detllm::jinja {
namespace {

using Method = Value (*)(Evaluator& ev, const Value& self, CallArgs& args);

std::string str_arg(const Params& p, size_t i, const char* fn) {
  const Value* v = p.get(i);
  if (!v || !v->is_string()) {
    fail("{}() argument must be str, not {}", fn, v ? type_name(*v) : "nothing");
  }
  return v->as_string();
}

// The code point range [start, end) of s that Python's optional start/end arguments select.
std::string sub_range(const std::string& s, const Params& p, size_t start_index) {
  if (!p.has(start_index) && !p.has(start_index + 1)) return s;
  const Value start = p.get_or(start_index, Value::none());
  const Value end = p.get_or(start_index + 1, Value::none());
  return slice(Value::string(s), start, end, Value::none()).as_string();
}

Value str_affix(const Value& self, CallArgs& args, bool prefix) {
  const char* fn = prefix ? "startswith" : "endswith";
  Params p(args, fn, {"prefix", "start", "end"});
  const std::string s = sub_range(self.as_string(), p, 1);
  const Value* arg = p.get(0);
  if (!arg) fail("{}() takes at least 1 argument (0 given)", fn);
  List candidates;
  if (arg->is_tuple()) {
    candidates = arg->as_list();
  } else if (arg->is_string()) {
    candidates.push_back(*arg);
  } else {
    fail("{} first arg must be str or a tuple of str, not {}", fn, type_name(*arg));
  }
  for (const Value& c : candidates) {
    if (!c.is_string()) fail("tuple for {} must only contain str, not {}", fn, type_name(c));
    const std::string& a = c.as_string();
    if (a.size() <= s.size() && (prefix ? s.compare(0, a.size(), a) == 0
                                        : s.compare(s.size() - a.size(), a.size(), a) == 0)) {
      return Value::boolean(true);
    }
  }
  return Value::boolean(false);
}

Value str_strip(const Value& self, CallArgs& args, bool left, bool right, const char* fn) {
  Params p(args, fn, {"chars"});
  return Value::string(text::strip(self.as_string(), p.get_string(0), left, right));
}

Value str_split(const Value& self, CallArgs& args, bool from_right) {
  Params p(args, from_right ? "rsplit" : "split", {"sep", "maxsplit"});
  List parts;
  for (auto& part : text::split(self.as_string(), p.get_string(0), p.get_int(1, -1), from_right)) {
    parts.push_back(Value::string(std::move(part)));
  }
  return Value::list(std::move(parts));
}

Value str_find(const Value& self, CallArgs& args, bool from_right, bool must_exist) {
  const char* fn = from_right ? (must_exist ? "rindex" : "rfind") : (must_exist ? "index" : "find");
  Params p(args, fn, {"sub", "start", "end"});
  const std::string sub = str_arg(p, 0, fn);
  int64_t offset = 0;
  if (p.has(1)) {
    // Searching a slice: positions are relative to its start, which is start clamped to len.
    const Value start = p.get_or(1, Value::none());
    if (start.is_int() || start.is_bool()) {
      const auto n = static_cast<int64_t>(text::length(self.as_string()));
      int64_t s = start.as_int();
      if (s < 0) s = std::max<int64_t>(0, s + n);
      offset = std::min(s, n);
    }
  }
  const int64_t hit = text::find(sub_range(self.as_string(), p, 1), sub, from_right);
  if (hit < 0 && must_exist) fail("substring not found");
  return Value::integer(hit < 0 ? -1 : hit + offset);
}

// str.format with automatic ({}), numbered ({0}) and named ({name}) fields; format specs and
// conversions are not supported.
Value str_format(Evaluator& ev, const Value& self, CallArgs& args) {
  const std::string& f = self.as_string();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      fail("str.format: single '}}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) fail("str.format: single '{{' encountered in format string");
    const std::string field = f.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      fail(
          "str.format: format specs, conversions and attribute lookups ('{{{}}}') are not "
          "supported; format the value with filters instead",
          field);
    }
    const Value* v = nullptr;
    if (field.empty() ||
        std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t index = field.empty() ? auto_index++ : std::stoul(field.substr(0, 9));
      if (index >= args.positional.size())
        fail("str.format: replacement index {} out of range", index);
      v = &args.positional[index];
    } else {
      for (const auto& [key, value] : args.keyword) {
        if (key == field) v = &value;
      }
      if (!v) fail("str.format: no argument named '{}'", field);
    }
    out += to_str(*v, ev.limits().max_output_bytes);
    if (out.size() > ev.limits().max_output_bytes) fail("str.format: text too long");
    i = close;
  }
  return Value::string(std::move(out));
}

Value str_join(Evaluator& ev, const Value& self, CallArgs& args) {
  Params p(args, "join", {"iterable"});
  if (!p.has(0)) fail("join() takes exactly one argument (0 given)");
  const List items = iterate(*p.get(0));
  ev.charge(items.size());
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      fail("sequence item {}: expected str instance, {} found", i, type_name(items[i]));
    }
    if (i) out += self.as_string();
    out += items[i].as_string();
    if (out.size() > ev.limits().max_output_bytes) fail("str.join: text too long");
  }
  return Value::string(std::move(out));
}

Value str_replace(Evaluator& ev, const Value& self, CallArgs& args) {
  Params p(args, "replace", {"old", "new", "count"});
  const std::string old = str_arg(p, 0, "replace");
  const std::string repl = str_arg(p, 1, "replace");
  const std::string& s = self.as_string();
  // Bound the result before building it: at most one replacement per code point plus one.
  const uint64_t hits =
      old.empty() ? text::length(s) + 1 : static_cast<uint64_t>(text::count(s, old));
  if (s.size() + hits * repl.size() > ev.limits().max_output_bytes)
    fail("str.replace: text too long");
  return Value::string(text::replace(s, old, repl, p.get_int(2, -1)));
}

Value str_partition(const Value& self, CallArgs& args, bool from_right) {
  Params p(args, from_right ? "rpartition" : "partition", {"sep"});
  const std::string sep = str_arg(p, 0, "partition");
  if (sep.empty()) fail("empty separator");
  const std::string& s = self.as_string();
  const size_t hit = from_right ? s.rfind(sep) : s.find(sep);
  if (hit == std::string::npos) {
    List parts = from_right ? List{Value::string(""), Value::string(""), self}
                            : List{self, Value::string(""), Value::string("")};
    return Value::tuple(std::move(parts));
  }
  return Value::tuple({Value::string(s.substr(0, hit)), Value::string(sep),
                       Value::string(s.substr(hit + sep.size()))});
}

Value str_method(Evaluator& ev, const std::string& name, const Value& self, CallArgs& args) {
  const std::string& s = self.as_string();
  if (name == "startswith" || name == "endswith")
    return str_affix(self, args, name == "startswith");
  if (name == "strip") return str_strip(self, args, true, true, "strip");
  if (name == "lstrip") return str_strip(self, args, true, false, "lstrip");
  if (name == "rstrip") return str_strip(self, args, false, true, "rstrip");
  if (name == "split" || name == "rsplit") return str_split(self, args, name == "rsplit");
  if (name == "splitlines") {
    Params p(args, "splitlines", {"keepends"});
    List lines;
    for (auto& line : text::splitlines(s, p.get_bool(0, false)))
      lines.push_back(Value::string(std::move(line)));
    return Value::list(std::move(lines));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    return str_find(self, args, name[0] == 'r', name.find("index") != std::string::npos);
  }
  if (name == "count") {
    Params p(args, "count", {"sub", "start", "end"});
    return Value::integer(text::count(sub_range(s, p, 1), str_arg(p, 0, "count")));
  }
  if (name == "replace") return str_replace(ev, self, args);
  if (name == "join") return str_join(ev, self, args);
  if (name == "format") return str_format(ev, self, args);
  if (name == "partition" || name == "rpartition")
    return str_partition(self, args, name == "rpartition");
  if (name == "removeprefix" || name == "removesuffix") {
    Params p(args, name, {"affix"});
    const std::string a = str_arg(p, 0, name.c_str());
    if (name == "removeprefix" && s.compare(0, a.size(), a) == 0)
      return Value::string(s.substr(a.size()));
    if (name == "removesuffix" && !a.empty() && a.size() <= s.size() &&
        s.compare(s.size() - a.size(), a.size(), a) == 0) {
      return Value::string(s.substr(0, s.size() - a.size()));
    }
    return self;
  }
  Params p(args, name, {});
  std::string mapped;
  if (name == "lower")
    mapped = text::lower(s);
  else if (name == "upper")
    mapped = text::upper(s);
  else if (name == "title")
    mapped = text::title(s);
  else if (name == "capitalize")
    mapped = text::capitalize(s);
  else
    return Value::boolean(text::predicate(s, name));  // isalpha, isdigit, ...
  if (mapped.size() > ev.limits().max_output_bytes) fail("str.{}: text too long", name);
  return Value::string(std::move(mapped));
}

Value dict_method(const std::string& name, const Value& self, CallArgs& args) {
  const Dict& d = self.as_dict();
  if (name == "get") {
    Params p(args, "get", {"key", "default"});
    if (!p.has(0)) fail("get expected at least 1 argument, got 0");
    if (const Value* v = d.find(*p.get(0))) return *v;
    return p.get_or(1, Value::none());
  }
  Params p(args, name, {});
  if (name == "copy") return self;
  List out;
  for (const auto& [key, value] : d.items()) {
    if (name == "keys")
      out.push_back(key);
    else if (name == "values")
      out.push_back(value);
    else
      out.push_back(Value::tuple({key, value}));  // items
  }
  return Value::list(std::move(out));
}

Value list_method(const std::string& name, const Value& self, CallArgs& args) {
  const List& items = self.as_list();
  if (name == "copy") {
    Params p(args, name, {});
    return self;
  }
  Params p(args, name, {"value"});
  if (!p.has(0)) fail("{}() takes exactly one argument (0 given)", name);
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!equals(items[i], *p.get(0))) continue;
    if (name == "index") return Value::integer(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") fail("{} is not in list", repr(*p.get(0), 200));
  return Value::integer(count);
}

bool one_of(const std::string& name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Value refused(const Value& self, const std::string& name) {
  const std::string message = "access to attribute '" + name + "' of '" + type_name(self) +
                              "' object is unsafe: chat templates cannot modify their inputs";
  return Value::function(type_name(self) + "." + name,
                         [message](Evaluator&, CallArgs&) -> Value { throw Failure(message); });
}

}  // namespace

std::optional<Value> find_method(const Value& obj, const std::string& name) {
  const std::string qualified = type_name(obj) + "." + name;
  if (obj.is_string()) {
    if (!one_of(name, {"startswith", "endswith",  "strip",      "lstrip",       "rstrip",
                       "split",      "rsplit",    "splitlines", "find",         "rfind",
                       "index",      "rindex",    "count",      "replace",      "join",
                       "format",     "partition", "rpartition", "removeprefix", "removesuffix",
                       "lower",      "upper",     "title",      "capitalize",   "isalpha",
                       "isdigit",    "isdecimal", "isnumeric",  "isalnum",      "isspace",
                       "islower",    "isupper"})) {
      return std::nullopt;
    }
    return Value::function(qualified, [obj, name](Evaluator& ev, CallArgs& args) {
      return str_method(ev, name, obj, args);
    });
  }
  if (obj.is_dict()) {
    if (one_of(name, {"pop", "popitem", "setdefault", "update", "clear"}))
      return refused(obj, name);
    if (!one_of(name, {"get", "keys", "values", "items", "copy"})) return std::nullopt;
    return Value::function(qualified, [obj, name](Evaluator& ev, CallArgs& args) {
      ev.charge(obj.as_dict().size());
      return dict_method(name, obj, args);
    });
  }
  if (obj.is_sequence()) {
    if (one_of(name, {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"})) {
      if (obj.is_list()) return refused(obj, name);
      return std::nullopt;
    }
    if (!one_of(name, {"index", "count", "copy"}) || (obj.is_tuple() && name == "copy")) {
      return std::nullopt;
    }
    return Value::function(qualified, [obj, name](Evaluator& ev, CallArgs& args) {
      ev.charge(obj.as_list().size());
      return list_method(name, obj, args);
    });
  }
  return std::nullopt;
}

}  // namespace detllm::jinja
