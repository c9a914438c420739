// Jinja values (see value.h): construction, Python truthiness and ==, and the text forms
// CPython gives them (str, repr, json.dumps), which a rendered prompt must reproduce exactly.
#include "jinja/value.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "jinja/text.h"

namespace detllm::jinja {
namespace {

constexpr int kMaxPrintDepth = 512;  // deeper values are circular (through a namespace)

uint32_t child_depth(uint32_t depth, const Value& v) {
  const uint32_t d = v.depth() + 1;
  if (d > kMaxValueDepth) {
    fail("value nested too deeply: lists, dicts and namespaces may nest {} levels", kMaxValueDepth);
  }
  return std::max(depth, d);
}

uint64_t add_weight(uint64_t total, const Value& v) {
  total += v.weight();
  if (total > kMaxValueWeight) {
    fail(
        "value too large: a list or dict would hold more than {} items in all; the template "
        "builds data without bound",
        kMaxValueWeight);
  }
  return total;
}

template <typename Json>
Value value_from_json(const Json& j, uint32_t depth) {
  if (depth > kMaxValueDepth) {
    fail("chat template context: JSON nested deeper than {} levels", kMaxValueDepth);
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::floating(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::floating(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(value_from_json(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.set(Value::string(it.key()), value_from_json(it.value(), depth + 1));
      }
      return Value::dict(std::move(d));
    }
    default:
      throw Error("chat template context: binary JSON values are not supported; pass text");
  }
}

class Printer {
 public:
  explicit Printer(size_t max_bytes) : max_bytes_(max_bytes) {}

  void str(const Value& v, int depth) {
    switch (v.kind()) {
      case Value::Kind::kUndefined:
        return;
      case Value::Kind::kString:
        return append(v.as_string());
      case Value::Kind::kList:
      case Value::Kind::kTuple:
      case Value::Kind::kDict:
      case Value::Kind::kNamespace:
        return repr(v, depth);
      default:
        return append(scalar_text(v));
    }
  }

  void repr(const Value& v, int depth) {
    if (depth > kMaxPrintDepth) fail("value nested too deeply to print (circular namespace?)");
    switch (v.kind()) {
      case Value::Kind::kUndefined:
        return append("Undefined");
      case Value::Kind::kString:
        return append(text::string_repr(v.as_string()));
      case Value::Kind::kList:
      case Value::Kind::kTuple: {
        const List& items = v.as_list();
        append(v.is_list() ? "[" : "(");
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) append(", ");
          repr(items[i], depth + 1);
        }
        if (v.is_tuple() && items.size() == 1) append(",");
        return append(v.is_list() ? "]" : ")");
      }
      case Value::Kind::kDict:
        return dict(v.as_dict(), depth);
      case Value::Kind::kNamespace:
        append("<Namespace ");
        dict(v.as_namespace().attrs, depth);
        return append(">");
      default:
        return append(scalar_text(v));
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void dict(const Dict& d, int depth) {
    // A namespace that holds itself prints its own dict as {...}, as CPython's repr does.
    if (std::find(open_dicts_.begin(), open_dicts_.end(), &d) != open_dicts_.end()) {
      return append("{...}");
    }
    open_dicts_.push_back(&d);
    append("{");
    bool first = true;
    for (const auto& [key, value] : d.items()) {
      if (!first) append(", ");
      first = false;
      repr(key, depth + 1);
      append(": ");
      repr(value, depth + 1);
    }
    append("}");
    open_dicts_.pop_back();
  }

  static std::string scalar_text(const Value& v) {
    switch (v.kind()) {
      case Value::Kind::kNone:
        return "None";
      case Value::Kind::kBool:
        return v.as_bool() ? "True" : "False";
      case Value::Kind::kInt:
        return std::to_string(v.as_int());
      case Value::Kind::kFloat:
        return text::float_repr(v.as_float());
      case Value::Kind::kFunction:
        return "<function " + v.as_function().name + ">";
      case Value::Kind::kLoop: {
        const LoopState& loop = v.as_loop();
        return "<LoopContext " + std::to_string(loop.index0 + 1) + "/" +
               std::to_string(loop.items->size()) + ">";
      }
      default:
        return "";
    }
  }

  void append(std::string_view s) {
    if (out_.size() + s.size() > max_bytes_) {
      fail("text too long: printing a value would pass the output limit of {} bytes", max_bytes_);
    }
    out_ += s;
  }

  size_t max_bytes_;
  std::string out_;
  std::vector<const Dict*> open_dicts_;
};

class JsonWriter {
 public:
  JsonWriter(const JsonOptions& options, size_t max_bytes)
      : options_(options), max_bytes_(max_bytes) {
    const bool indented = options.indent.has_value();
    item_sep_ = options.separators ? options.separators->first : (indented ? "," : ", ");
    key_sep_ = options.separators ? options.separators->second : ": ";
  }

  void write(const Value& v, int depth) {
    if (depth > kMaxPrintDepth) fail("tojson: circular reference detected");
    switch (v.kind()) {
      case Value::Kind::kNone:
        return append("null");
      case Value::Kind::kBool:
        return append(v.as_bool() ? "true" : "false");
      case Value::Kind::kInt:
        return append(std::to_string(v.as_int()));
      case Value::Kind::kFloat:
        return append(float_text(v.as_float()));
      case Value::Kind::kString:
        return append(text::json_quote(v.as_string(), options_.ensure_ascii));
      case Value::Kind::kList:
      case Value::Kind::kTuple: {
        const List& items = v.as_list();
        if (items.empty()) return append("[]");
        append("[");
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) append(item_sep_);
          newline(depth + 1);
          write(items[i], depth + 1);
        }
        newline(depth);
        return append("]");
      }
      case Value::Kind::kDict:
        return write_dict(v.as_dict(), depth);
      default: {
        std::string type = type_name(v);
        fail("tojson: Object of type {} is not JSON serializable", type);
      }
    }
  }

  std::string take() { return std::move(out_); }

 private:
  static std::string float_text(double d) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
    return text::float_repr(d);
  }

  static std::string key_text(const Value& k) {
    switch (k.kind()) {
      case Value::Kind::kString:
        return k.as_string();
      case Value::Kind::kNone:
        return "null";
      case Value::Kind::kBool:
        return k.as_bool() ? "true" : "false";
      case Value::Kind::kInt:
        return std::to_string(k.as_int());
      case Value::Kind::kFloat:
        return float_text(k.as_float());
      default: {
        std::string type = type_name(k);
        fail("tojson: keys must be str, int, float, bool or None, not {}", type);
      }
    }
  }

  void write_dict(const Dict& d, int depth) {
    if (d.size() == 0) return append("{}");
    std::vector<const std::pair<Value, Value>*> items;
    for (const auto& item : d.items()) items.push_back(&item);
    if (options_.sort_keys) {
      for (const auto* item : items) {
        if (!item->first.is_string()) fail("tojson: sort_keys needs every key to be a string");
      }
      std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) {
        return a->first.as_string() < b->first.as_string();
      });
    }
    append("{");
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) append(item_sep_);
      newline(depth + 1);
      append(text::json_quote(key_text(items[i]->first), options_.ensure_ascii));
      append(key_sep_);
      write(items[i]->second, depth + 1);
    }
    newline(depth);
    append("}");
  }

  void newline(int depth) {
    if (!options_.indent) return;
    append("\n");
    for (int i = 0; i < depth; ++i) append(*options_.indent);
  }

  void append(std::string_view s) {
    if (out_.size() + s.size() > max_bytes_) {
      fail("tojson: text would pass the output limit of {} bytes", max_bytes_);
    }
    out_ += s;
  }

  const JsonOptions& options_;
  size_t max_bytes_;
  std::string item_sep_, key_sep_;
  std::string out_;
};

}  // namespace

Value Value::list(List items) {
  uint64_t w = 1;
  uint32_t d = 1;
  for (const Value& v : items) {
    w = add_weight(w, v);
    d = child_depth(d, v);
  }
  return Value(Kind::kList, std::make_shared<const ListData>(ListData{std::move(items), w, d}));
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::dict(Dict d) {
  uint64_t w = 1;
  uint32_t depth = 1;
  for (const auto& [key, value] : d.items()) {
    w = add_weight(add_weight(w, key), value);
    depth = child_depth(child_depth(depth, key), value);
  }
  return Value(Kind::kDict, std::make_shared<const DictData>(DictData{std::move(d), w, depth}));
}

Value Value::function(std::string name, std::function<Value(Evaluator&, CallArgs&)> fn) {
  return Value(Kind::kFunction,
               std::make_shared<const Function>(Function{std::move(name), std::move(fn)}));
}

Value Value::from_json(const nlohmann::json& j) {
  return value_from_json(j, 0);
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  return value_from_json(j, 0);
}

int64_t Value::as_int() const {
  if (kind_ == Kind::kBool) return as_bool() ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_float() const {
  if (kind_ == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

const List& Value::as_list() const {
  return std::get<std::shared_ptr<const ListData>>(data_)->items;
}

const Dict& Value::as_dict() const {
  return std::get<std::shared_ptr<const DictData>>(data_)->dict;
}

uint64_t Value::weight() const {
  if (kind_ == Kind::kList || kind_ == Kind::kTuple) {
    return std::get<std::shared_ptr<const ListData>>(data_)->weight;
  }
  if (kind_ == Kind::kDict) return std::get<std::shared_ptr<const DictData>>(data_)->weight;
  return 1;
}

uint32_t Value::depth() const {
  switch (kind_) {
    case Kind::kList:
    case Kind::kTuple:
      return std::get<std::shared_ptr<const ListData>>(data_)->depth;
    case Kind::kDict:
      return std::get<std::shared_ptr<const DictData>>(data_)->depth;
    case Kind::kNamespace:
      return as_namespace().depth;
    default:
      return 0;
  }
}

void Namespace::set(const std::string& name, Value value) {
  depth = child_depth(depth, value);
  attrs.set(Value::string(name), std::move(value));
}

std::string Value::undefined_message() const {
  if (const auto* hint = std::get_if<std::shared_ptr<const std::string>>(&data_)) return **hint;
  return "value is undefined";
}

const Value* Dict::find(const Value& key) const {
  for (const auto& item : items_) {
    if (equals(item.first, key)) return &item.second;
  }
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& item : items_) {
    if (item.first.is_string() && item.first.as_string() == key) return &item.second;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& item : items_) {
    if (equals(item.first, key)) {
      item.second = std::move(value);
      return;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kFunction:
      return "function";
    case Value::Kind::kLoop:
      return "LoopContext";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0.0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return !v.as_list().empty();
    case Value::Kind::kDict:
      return v.as_dict().size() != 0;
    default:
      return true;
  }
}

int compare_numbers(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) {
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  const double x = a.as_float(), y = b.as_float();
  if (std::isnan(x) || std::isnan(y)) return 2;
  // An int beyond 2^53 cannot be represented as a double; compare exactly when one side is int.
  if (!a.is_float() || !b.is_float()) {
    const int64_t i = a.is_float() ? b.as_int() : a.as_int();
    const double d = a.is_float() ? x : y;
    const int sign = a.is_float() ? -1 : 1;  // result as (int side) vs (double side)
    int r;
    if (d >= 9223372036854775808.0) {
      r = -1;
    } else if (d < -9223372036854775808.0) {
      r = 1;
    } else {
      const double fl = std::floor(d);
      const auto whole = static_cast<int64_t>(fl);
      if (i != whole) {
        r = i < whole ? -1 : 1;
      } else {
        r = (d > fl) ? -1 : 0;
      }
    }
    return r * sign;
  }
  return x < y ? -1 : (x > y ? 1 : 0);
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == 0;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (&x == &y) return true;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (&x == &y) return true;
      if (x.size() != y.size()) return false;
      for (const auto& [key, value] : x.items()) {
        const Value* other = y.find(key);
        if (!other || !equals(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.as_namespace() == &b.as_namespace();
    case Value::Kind::kFunction:
      return &a.as_function() == &b.as_function();
    case Value::Kind::kLoop:
      return &a.as_loop() == &b.as_loop();
    default:
      return false;
  }
}

std::string to_str(const Value& v, size_t max_bytes) {
  if (v.is_string()) {
    if (v.as_string().size() > max_bytes) {
      fail("text too long: the result would pass the output limit of {} bytes", max_bytes);
    }
    return v.as_string();
  }
  Printer p(max_bytes);
  p.str(v, 0);
  return p.take();
}

std::string repr(const Value& v, size_t max_bytes) {
  Printer p(max_bytes);
  p.repr(v, 0);
  return p.take();
}

std::string to_json(const Value& v, const JsonOptions& options, size_t max_bytes) {
  JsonWriter w(options, max_bytes);
  w.write(v, 0);
  return w.take();
}

}  // namespace detllm::jinja
