// Jinja filters (`value | name(args)`), each as jinja2 3.1 defines it, except `tojson`, which is
// the json.dumps wrapper transformers installs (no HTML escaping, keys in insertion order).
// Filters that yield generators in jinja2 (map, select, unique...) return lists here.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_map>

#include "jinja/builtins.h"
#include "jinja/evaluator.h"
#include "jinja/lexer.h"
#include "jinja/ops.h"
#include "jinja/text.h"

namespace detllm::jinja {
namespace {

std::string str_of(Evaluator& ev, const Value& v) {
  return to_str(v, ev.limits().max_output_bytes);
}

Value text_value(Evaluator& ev, std::string s) {
  if (s.size() > ev.limits().max_output_bytes) fail("filter result longer than the output limit");
  return Value::string(std::move(s));
}

// ---- Python number parsing (float(str), int(str, base)) ---------------------------------

// Removes PEP 515 underscores (only allowed between digits); nullopt when misplaced.
std::optional<std::string> without_underscores(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      out.push_back(s[i]);
      continue;
    }
    const bool ok = i > 0 && i + 1 < s.size() &&
                    std::isalnum(static_cast<unsigned char>(s[i - 1])) &&
                    std::isalnum(static_cast<unsigned char>(s[i + 1]));
    if (!ok) return std::nullopt;
  }
  return out;
}

std::optional<double> parse_float(std::string_view input) {
  const std::string stripped = text::strip(input, std::nullopt, true, true);
  auto body = without_underscores(stripped);
  if (!body || body->empty()) return std::nullopt;
  std::string s = *body;
  double sign = 1.0;
  if (s[0] == '+' || s[0] == '-') {
    if (s[0] == '-') sign = -1.0;
    s.erase(0, 1);
  }
  std::string lower = s;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "inf" || lower == "infinity") return sign * HUGE_VAL;
  if (lower == "nan") return std::nan("");
  // digits [. digits] [e [+-] digits], with at least one digit in the mantissa.
  size_t i = 0, mantissa_digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++mantissa_digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++mantissa_digits;
  }
  if (mantissa_digits == 0) return std::nullopt;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    const size_t digits_start = j;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j == digits_start) return std::nullopt;
    i = j;
  }
  if (i != s.size()) return std::nullopt;
  return sign * parse_decimal(s);
}

std::optional<int64_t> parse_int(std::string_view input, int64_t base) {
  const std::string stripped = text::strip(input, std::nullopt, true, true);
  auto body = without_underscores(stripped);
  if (!body || body->empty()) return std::nullopt;
  std::string s = *body;
  bool negative = false;
  if (s[0] == '+' || s[0] == '-') {
    negative = s[0] == '-';
    s.erase(0, 1);
  }
  if (s.size() > 2 && s[0] == '0') {
    const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[1])));
    const int64_t prefixed = p == 'x' ? 16 : (p == 'o' ? 8 : (p == 'b' ? 2 : 0));
    if (prefixed && (base == prefixed || base == 0)) {
      s.erase(0, 2);
      base = prefixed;
    }
  }
  if (base == 0) base = 10;
  if (base < 2 || base > 36) fail("int() base must be >= 2 and <= 36, or 0");
  if (s.empty()) return std::nullopt;
  uint64_t magnitude = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), magnitude, static_cast<int>(base));
  if (r.ptr != s.data() + s.size()) return std::nullopt;
  if (r.ec == std::errc::result_out_of_range ||
      magnitude > uint64_t{INT64_MAX} + (negative ? 1 : 0)) {
    fail("int: '{}' does not fit in 64 bits", stripped);
  }
  return negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
}

int64_t float_to_int(double d) {
  if (std::isnan(d)) fail("cannot convert float NaN to integer");
  if (std::isinf(d)) fail("cannot convert float infinity to integer");
  if (d >= 9223372036854775808.0 || d < -9223372036854775808.0) {
    fail("int: {} does not fit in 64 bits", text::float_repr(d));
  }
  return static_cast<int64_t>(d);
}

// ---- attribute lookup for map/sort/selectattr... ----------------------------------------

std::vector<Value> attribute_parts(const Value& attribute) {
  if (attribute.is_none() || attribute.is_undefined()) return {};
  if (!attribute.is_string()) return {attribute};
  std::vector<Value> parts;
  for (auto& part : text::split(attribute.as_string(), std::string("."), -1, false)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                     [](char c) { return c >= '0' && c <= '9'; });
    if (digits) {
      parts.push_back(Value::integer(parse_int(part, 10).value_or(0)));
    } else {
      parts.push_back(Value::string(std::move(part)));
    }
  }
  return parts;
}

Value lookup(Evaluator& ev, Value item, const std::vector<Value>& parts, const Value* fallback) {
  for (const Value& part : parts) {
    item = ev.get_item(item, part);
    if (fallback && item.is_undefined()) item = *fallback;
  }
  return item;
}

Value ignore_case(const Value& v) {
  return v.is_string() ? Value::string(text::lower(v.as_string())) : v;
}

// ---- filters ---------------------------------------------------------------------------

Value f_abs(Evaluator&, const Value& v, CallArgs& args) {
  Params(args, "abs", {});
  if (v.is_float()) return Value::floating(std::fabs(v.as_float()));
  if (v.is_number()) {
    if (v.as_int() == INT64_MIN) fail("integer overflow in abs");
    return Value::integer(std::llabs(v.as_int()));
  }
  fail("bad operand type for abs(): '{}'", type_name(v));
}

Value f_attr(Evaluator& ev, const Value& v, CallArgs& args) {
  Params p(args, "attr", {"name"});
  const std::optional<std::string> name = p.get_string(0);
  if (!name) fail("attr() needs an attribute name");
  if (v.is_undefined()) throw Failure(v.undefined_message());
  if (v.is_dict()) {  // attributes only: no fallback to keys
    if (auto m = find_method(v, *name)) return *m;
    return Value::undefined("'dict object' has no attribute '" + *name + "'");
  }
  return ev.get_attr(v, *name);
}

Value f_capitalize(Evaluator& ev, const Value& v, CallArgs& args) {
  Params(args, "capitalize", {});
  return text_value(ev, text::capitalize(str_of(ev, v)));
}

Value f_center(Evaluator& ev, const Value& v, CallArgs& args) {
  Params p(args, "center", {"width"});
  const std::string s = str_of(ev, v);
  const int64_t width = p.get_int(0, 80);
  const auto len = static_cast<int64_t>(text::length(s));
  if (width <= len) return Value::string(s);
  if (static_cast<uint64_t>(width) > ev.limits().max_output_bytes) fail("center: width too large");
  const int64_t marg = width - len;
  const int64_t left = marg / 2 + (marg & width & 1);
  return Value::string(std::string(static_cast<size_t>(left), ' ') + s +
                       std::string(static_cast<size_t>(marg - left), ' '));
}

Value f_length(Evaluator&, const Value& v, CallArgs& args) {
  Params(args, "length", {});
  return Value::integer(length(v));
}

Value f_default(Evaluator&, const Value& v, CallArgs& args) {
  Params p(args, "default", {"default_value", "boolean"});
  if (v.is_undefined() || (p.get_bool(1, false) && !truthy(v))) {
    return p.get_or(0, Value::string(""));
  }
  return v;
}

Value f_dictsort(Evaluator& ev, const Value& v, CallArgs& args) {
  Params p(args, "dictsort", {"case_sensitive", "by", "reverse"});
  if (v.is_undefined()) throw Failure(v.undefined_message());
  if (!v.is_dict()) fail("dictsort: '{}' object has no attribute 'items'", type_name(v));
  const bool case_sensitive = p.get_bool(0, false);
  const std::string by = p.get_string(1).value_or("key");
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  const size_t pos = by == "key" ? 0 : 1;
  const bool reverse = p.get_bool(2, false);
  List items;
  for (const auto& [key, value] : v.as_dict().items()) items.push_back(Value::tuple({key, value}));
  ev.charge(items.size() * 16);
  const auto key_of = [&](const Value& item) {
    const Value& k = item.as_list()[pos];
    return case_sensitive ? k : ignore_case(k);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? order(key_of(b), key_of(a)) < 0 : order(key_of(a), key_of(b)) < 0;
  });
  return Value::list(std::move(items));
}

Value f_escape(Evaluator& ev, const Value& v, CallArgs& args) {
  Params(args, "escape", {});
  std::string out;
  for (char c : str_of(ev, v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return text_value(ev, std::move(out));
}

Value f_first(Evaluator&, const Value& v, CallArgs& args) {
  Params(args, "first", {});
  if (v.is_string()) {
    if (auto c = item(v, Value::integer(0))) return *c;
  } else if (v.is_dict()) {
    if (v.as_dict().size()) return v.as_dict().items().front().first;
  } else {
    const List items = iterate(v);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value f_last(Evaluator&, const Value& v, CallArgs& args) {
  Params(args, "last", {});
  if (v.is_string()) {
    if (auto c = item(v, Value::integer(-1))) return *c;
  } else if (v.is_dict()) {
    if (v.as_dict().size()) return v.as_dict().items().back().first;
  } else {
    const List items = iterate(v);
    if (!items.empty()) return items.back();
  }
  return Value::undefined("No last item, sequence was empty.");
}

Value f_float(Evaluator&, const Value& v, CallArgs& args) {
  Params p(args, "float", {"default"});
  const Value fallback = p.get_or(0, Value::floating(0.0));
  if (v.is_undefined()) throw Failure(v.undefined_message());
  if (v.is_number()) return Value::floating(v.as_float());
  if (v.is_string()) {
    if (auto d = parse_float(v.as_string())) return Value::floating(*d);
  }
  return fallback;
}

Value f_int(Evaluator&, const Value& v, CallArgs& args) {
  Params p(args, "int", {"default", "base"});
  const Value fallback = p.get_or(0, Value::integer(0));
  if (v.is_undefined()) throw Failure(v.undefined_message());
  if (v.is_float()) {
    if (std::isnan(v.as_float())) return fallback;
    return Value::integer(float_to_int(v.as_float()));
  }
  if (v.is_number()) return Value::integer(v.as_int());
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), p.get_int(1, 10))) return Value::integer(*i);
    if (auto d = parse_float(v.as_string())) {
      if (std::isnan(*d) || std::isinf(*d)) return fallback;
      return Value::integer(float_to_int(*d));
    }
  }
  return fallback;
}

Value f_indent(Evaluator& ev, const Value& v, CallArgs& args) {
  Params p(args, "indent", {"width", "first", "blank"});
  if (v.is_undefined()) throw Failure(v.undefined_message());
  if (!v.is_string()) fail("indent: can only indent text, not {}", type_name(v));
  std::string indention;
  const Value width = p.get_or(0, Value::integer(4));
  if (width.is_string()) {
    indention = width.as_string();
  } else {
    const int64_t n = p.get_int(0, 4);
    if (n > 0 && static_cast<uint64_t>(n) > ev.limits().max_output_bytes)
      fail("indent: width too large");
    indention.assign(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
  }
  const bool first = p.get_bool(1, false);
  const bool blank = p.get_bool(2, false);
  std::vector<std::string> lines = text::splitlines(v.as_string() + "\n", false);
  const uint64_t budget = v.as_string().size() + (lines.size() + 1) * indention.size();
  if (budget > ev.limits().max_output_bytes) fail("indent: text too long");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i && (blank || !lines[i].empty())) out += indention;
    out += lines[i];
  }
  if (first) out = indention + out;
  return Value::string(std::move(out));
}

Value f_items(Evaluator&, const Value& v, CallArgs& args) {
  Params(args, "items", {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [key, value] : v.as_dict().items()) out.push_back(Value::tuple({key, value}));
  return Value::list(std::move(out));
}

Value f_join(Evaluator& ev, const Value& v, CallArgs& args) {
  Params p(args, "join", {"d", "attribute"});
  const std::string sep = str_of(ev, p.get_or(0, Value::string("")));
  const std::vector<Value> parts = attribute_parts(p.get_or(1, Value::none()));
  const List items = iterate(v);
  ev.charge(items.size());
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += str_of(ev, parts.empty() ? items[i] : lookup(ev, items[i], parts, nullptr));
    if (out.size() > ev.limits().max_output_bytes) fail("join: text too long");
  }
  return Value::string(std::move(out));
}

Value f_list(Evaluator& ev, const Value& v, CallArgs& args) {
  Params(args, "list", {});
  List items = iterate(v);
  ev.charge(items.size());
  return Value::list(std::move(items));
}

Value f_lower(Evaluator& ev, const Value& v, CallArgs& args) {
  Params(args, "lower", {});
  return text_value(ev, text::lower(str_of(ev, v)));
}

Value f_upper(Evaluator& ev, const Value& v, CallArgs& args) {
  Params(args, "upper", {});
  return text_value(ev, text::upper(str_of(ev, v)));
}

Value f_map(Evaluator& ev, const Value& v, CallArgs& args) {
  if (!truthy(v)) return Value::list({});  // jinja2 maps nothing over a falsy value
  const List items = iterate(v);
  ev.charge(items.size());
  List out;
  if (args.positional.empty()) {
    Params p(args, "map", {"attribute", "default"});
    if (!p.has(0)) fail("map requires a filter argument");
    const std::vector<Value> parts = attribute_parts(*p.get(0));
    const Value* fallback = p.get(1) && !p.get(1)->is_none() ? p.get(1) : nullptr;
    for (const Value& item : items) out.push_back(lookup(ev, item, parts, fallback));
    return Value::list(std::move(out));
  }
  if (!args.positional[0].is_string()) fail("map: the filter name must be a string");
  const std::string name = args.positional[0].as_string();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) {
    CallArgs a = rest;
    out.push_back(ev.apply_filter(name, item, a));
  }
  return Value::list(std::move(out));
}

// select / reject / selectattr / rejectattr.
Value select_items(Evaluator& ev, const Value& v, CallArgs& args, bool keep, bool by_attr) {
  if (!truthy(v)) return Value::list({});
  size_t next = 0;
  std::vector<Value> parts;
  if (by_attr) {
    if (args.positional.empty()) fail("Missing parameter for attribute name");
    parts = attribute_parts(args.positional[next++]);
  }
  std::optional<std::string> test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) fail("select: the test name must be a string");
    test = args.positional[next++].as_string();
  }
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + static_cast<ptrdiff_t>(next),
                         args.positional.end());
  rest.keyword = args.keyword;
  const List items = iterate(v);
  ev.charge(items.size());
  List out;
  for (const Value& item : items) {
    const Value subject = by_attr ? lookup(ev, item, parts, nullptr) : item;
    bool result;
    if (test) {
      CallArgs a = rest;
      result = ev.apply_test(*test, subject, a);
    } else {
      result = truthy(subject);
    }
    if (result == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_items(ev, v, a, true, false);
}
Value f_reject(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_items(ev, v, a, false, false);
}
Value f_selectattr(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_items(ev, v, a, true, true);
}
Value f_rejectattr(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_items(ev, v, a, false, true);
}

// min / max: the first smallest (largest) item by key.
Value extreme(Evaluator& ev, const Value& v, CallArgs& args, bool want_max) {
  Params p(args, want_max ? "max" : "min", {"case_sensitive", "attribute"});
  const bool case_sensitive = p.get_bool(0, false);
  const std::vector<Value> parts = attribute_parts(p.get_or(1, Value::none()));
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  ev.charge(items.size());
  const auto key_of = [&](const Value& item) {
    Value k = lookup(ev, item, parts, nullptr);
    return case_sensitive ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key_of(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key_of(items[i]);
    if (want_max ? order(k, best_key) > 0 : order(k, best_key) < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

Value f_min(Evaluator& ev, const Value& v, CallArgs& a) {
  return extreme(ev, v, a, false);
}
Value f_max(Evaluator& ev, const Value& v, CallArgs& a) {
  return extreme(ev, v, a, true);
}

Value f_replace(Evaluator& ev, const Value& v, CallArgs& args) {
  Params p(args, "replace", {"old", "new", "count"});
  if (!p.has(0) || !p.has(1)) fail("replace() needs the old and the new text");
  const std::string s = str_of(ev, v);
  const std::string old = str_of(ev, *p.get(0));
  const std::string repl = str_of(ev, *p.get(1));
  const uint64_t hits =
      old.empty() ? text::length(s) + 1 : static_cast<uint64_t>(text::count(s, old));
  if (s.size() + hits * repl.size() > ev.limits().max_output_bytes) fail("replace: text too long");
  return Value::string(text::replace(s, old, repl, p.get_int(2, -1)));
}

Value f_reverse(Evaluator&, const Value& v, CallArgs& args) {
  Params(args, "reverse", {});
  if (v.is_string()) {
    std::u32string cps = text::decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::string(text::encode(cps));
  }
  if (!v.is_sequence() && !v.is_dict() && !v.is_undefined()) fail("argument must be iterable");
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_round(Evaluator&, const Value& v, CallArgs& args) {
  Params p(args, "round", {"precision", "method"});
  const int64_t precision = p.get_int(0, 0);
  const std::string method = p.get_string(1).value_or("common");
  if (method != "common" && method != "ceil" && method != "floor") {
    fail("method must be common, ceil or floor");
  }
  if (v.is_undefined()) throw Failure(v.undefined_message());
  if (!v.is_number()) fail("type {} doesn't define __round__ method", type_name(v));
  if (method == "common") {
    if (!v.is_float()) {
      if (precision >= 0) return Value::integer(v.as_int());
      const double scale = std::pow(10.0, static_cast<double>(-precision));
      return Value::integer(float_to_int(std::nearbyint(v.as_float() / scale) * scale));
    }
    const double x = v.as_float();
    if (!std::isfinite(x) || precision > 350) return Value::floating(x);
    if (precision >= 0) {
      // printf rounds the exact binary value half-to-even, as CPython's round() does.
      char buf[800];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
      return Value::floating(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value::floating(std::nearbyint(x / scale) * scale);
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = v.as_float() * scale;
  if (!std::isfinite(scaled)) fail("cannot convert float infinity to integer");
  const double r = method == "ceil" ? std::ceil(scaled) : std::floor(scaled);
  return Value::floating(r / scale);
}

Value f_safe(Evaluator& ev, const Value& v, CallArgs& args) {
  Params(args, "safe", {});
  return Value::string(str_of(ev, v));
}

Value f_sort(Evaluator& ev, const Value& v, CallArgs& args) {
  Params p(args, "sort", {"reverse", "case_sensitive", "attribute"});
  const bool reverse = p.get_bool(0, false);
  const bool case_sensitive = p.get_bool(1, false);
  const Value attribute = p.get_or(2, Value::none());
  std::vector<std::vector<Value>> attrs;  // comma-separated attributes, each a dotted path
  if (attribute.is_string()) {
    for (const auto& one : text::split(attribute.as_string(), std::string(","), -1, false)) {
      attrs.push_back(attribute_parts(Value::string(one)));
    }
  } else {
    attrs.push_back(attribute_parts(attribute));
  }
  List items = iterate(v);
  ev.charge(items.size() * 16);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) {
    List key;
    for (const auto& parts : attrs) {
      Value k = lookup(ev, items[i], parts, nullptr);
      key.push_back(case_sensitive ? k : ignore_case(k));
    }
    keyed.emplace_back(Value::list(std::move(key)), i);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? order(b.first, a.first) < 0 : order(a.first, b.first) < 0;
  });
  List out;
  for (const auto& [key, i] : keyed) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Value f_string(Evaluator& ev, const Value& v, CallArgs& args) {
  Params(args, "string", {});
  return Value::string(str_of(ev, v));
}

Value f_sum(Evaluator& ev, const Value& v, CallArgs& args) {
  Params p(args, "sum", {"attribute", "start"});
  const std::vector<Value> parts = attribute_parts(p.get_or(0, Value::none()));
  Value total = p.get_or(1, Value::integer(0));
  if (total.is_string()) fail("sum() can't sum strings [use ''.join(seq) instead]");
  const List items = iterate(v);
  ev.charge(items.size());
  for (const Value& item : items) {
    total = binary(BinaryOp::kAdd, total, lookup(ev, item, parts, nullptr),
                   ev.limits().max_output_bytes);
  }
  return total;
}

// jinja2's title: words start after '-', whitespace, '(', '{', '[' or '<'.
Value f_title(Evaluator& ev, const Value& v, CallArgs& args) {
  Params(args, "title", {});
  const std::u32string cps = text::decode(str_of(ev, v));
  const auto separator = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c);
  };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    const bool sep = separator(cps[i]);
    while (j < cps.size() && separator(cps[j]) == sep) ++j;
    const std::string first = text::encode(std::u32string_view(cps).substr(i, 1));
    out += text::upper(first);
    out += text::lower(text::encode(std::u32string_view(cps).substr(i + 1, j - i - 1)));
    i = j;
  }
  return text_value(ev, std::move(out));
}

Value f_tojson(Evaluator& ev, const Value& v, CallArgs& args) {
  Params p(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions options;
  options.ensure_ascii = p.get_bool(0, false);
  if (const Value* indent = p.get(1); indent && !indent->is_none()) {
    if (indent->is_string()) {
      options.indent = indent->as_string();
    } else {
      const int64_t n = p.get_int(1, 0);
      if (n > 1024) fail("tojson: indent too large");
      options.indent = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
    }
  }
  if (const Value* seps = p.get(2); seps && !seps->is_none()) {
    if (!seps->is_sequence() || seps->as_list().size() != 2 || !seps->as_list()[0].is_string() ||
        !seps->as_list()[1].is_string()) {
      fail("tojson: separators must be a pair of strings");
    }
    options.separators = {seps->as_list()[0].as_string(), seps->as_list()[1].as_string()};
  }
  options.sort_keys = p.get_bool(3, false);
  ev.charge(v.weight());
  return Value::string(to_json(v, options, ev.limits().max_output_bytes));
}

Value f_trim(Evaluator& ev, const Value& v, CallArgs& args) {
  Params p(args, "trim", {"chars"});
  return Value::string(text::strip(str_of(ev, v), p.get_string(0), true, true));
}

Value f_unique(Evaluator& ev, const Value& v, CallArgs& args) {
  Params p(args, "unique", {"case_sensitive", "attribute"});
  const bool case_sensitive = p.get_bool(0, false);
  const std::vector<Value> parts = attribute_parts(p.get_or(1, Value::none()));
  List seen, out;
  for (const Value& item : iterate(v)) {
    Value key = lookup(ev, item, parts, nullptr);
    if (!case_sensitive) key = ignore_case(key);
    if (key.is_list() || key.is_dict()) fail("unhashable type: '{}'", type_name(key));
    ev.charge(seen.size() + 1);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(std::move(key));
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Value f_format(Evaluator& ev, const Value& v, CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    fail("format: can't handle positional and keyword arguments at the same time");
  }
  Value packed;
  if (!args.keyword.empty()) {
    Dict d;
    for (const auto& [key, value] : args.keyword) d.set(Value::string(key), value);
    packed = Value::dict(std::move(d));
  } else {
    packed = Value::tuple(args.positional);
  }
  return percent_format(str_of(ev, v), packed, ev.limits().max_output_bytes);
}

Value f_wordcount(Evaluator& ev, const Value& v, CallArgs& args) {
  Params(args, "wordcount", {});
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : text::decode(str_of(ev, v))) {
    std::string one;
    text::append_code_point(one, c);
    const bool word = c == '_' || text::predicate(one, "isalnum");
    if (word && !in_word) ++words;
    in_word = word;
  }
  return Value::integer(words);
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"forceescape", f_escape},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto& table = filters();
  const auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

bool filter_exists(std::string_view name) {
  // jinja2 filters detllm does not implement: templates may name them (in branches they never
  // take); running one fails with a clear error.
  static constexpr std::string_view kUnsupported[] = {
      "batch",     "filesizeformat", "groupby",   "pprint", "random",   "slice",
      "striptags", "truncate",       "urlencode", "urlize", "wordwrap", "xmlattr"};
  return find_filter(name) || std::find(std::begin(kUnsupported), std::end(kUnsupported), name) !=
                                  std::end(kUnsupported);
}

}  // namespace detllm::jinja
