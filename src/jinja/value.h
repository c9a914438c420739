// The values a Jinja template computes with, modelled on the Python objects jinja2 uses: none,
// bool, int, float, str, list, tuple, dict (insertion-ordered), namespace, callables, the loop
// object and Undefined. Printing (str/repr) and tojson follow CPython so output matches HF.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"

namespace detllm::jinja {

class Value;
class Dict;
class Evaluator;
struct Namespace;
struct LoopState;
struct Function;
struct ListData;
struct DictData;
using List = std::vector<Value>;

// Largest value tree (see Value::weight) a template may build; bounds ==, repr and tojson.
inline constexpr uint64_t kMaxValueWeight = uint64_t{1} << 24;
// Deepest nesting of lists, dicts and namespaces; bounds recursion when values are walked or
// destroyed.
inline constexpr uint32_t kMaxValueDepth = 256;

// An error in template code found while rendering, before the evaluator has attached the
// template position (it rethrows it as a detllm::Error naming line and column).
class Failure : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Failure(fmt::format(format, std::forward<Args>(args)...));
}

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,  // a missing variable, attribute or item (jinja2's default Undefined)
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,  // namespace(): the one mutable object templates can assign attributes on
    kFunction,   // builtin function, bound method or macro
    kLoop,       // the `loop` variable of a for loop
  };

  Value() = default;  // undefined, with no hint
  static Value undefined(std::string hint) {
    return Value(Kind::kUndefined, std::make_shared<const std::string>(std::move(hint)));
  }
  static Value none() {
    Value v;
    v.kind_ = Kind::kNone;
    return v;
  }
  static Value boolean(bool b) { return Value(Kind::kBool, b); }
  static Value integer(int64_t i) { return Value(Kind::kInt, i); }
  static Value floating(double d) { return Value(Kind::kFloat, d); }
  // Strings are shared, not copied, when values are copied (message contents are read often).
  static Value string(std::string s) {
    return Value(Kind::kString, std::make_shared<const std::string>(std::move(s)));
  }
  static Value list(List items);
  static Value tuple(List items);
  static Value dict(Dict d);
  static Value ns(std::shared_ptr<Namespace> n) { return Value(Kind::kNamespace, std::move(n)); }
  static Value function(std::string name, std::function<Value(Evaluator&, struct CallArgs&)> fn);
  static Value function(std::shared_ptr<const Function> fn) {
    return Value(Kind::kFunction, std::move(fn));
  }
  static Value loop(std::shared_ptr<LoopState> l) { return Value(Kind::kLoop, std::move(l)); }
  // JSON -> Value: objects become dicts (in the json's key order), arrays lists.
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is int
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence() const { return is_list() || is_tuple(); }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool is_loop() const { return kind_ == Kind::kLoop; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;   // int or bool
  double as_float() const;  // int, bool or float
  const std::string& as_string() const {
    return *std::get<std::shared_ptr<const std::string>>(data_);
  }
  const List& as_list() const;  // list or tuple
  const Dict& as_dict() const;
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(data_); }
  const std::shared_ptr<Namespace>& namespace_ptr() const {
    return std::get<std::shared_ptr<Namespace>>(data_);
  }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(data_); }
  LoopState& as_loop() const { return *std::get<std::shared_ptr<LoopState>>(data_); }
  // For an undefined value: the message jinja2 raises when it is used in a failing way.
  std::string undefined_message() const;
  // Nodes in the value's tree, shared parts counted each time they are reached (1 for
  // scalars and for namespaces, which are compared by identity). Capped at kMaxValueWeight
  // when the value is built, so walking a value is never exponential.
  uint64_t weight() const;
  uint32_t depth() const;  // 0 for scalars, 1 + deepest child for containers and namespaces

 private:
  using Data = std::variant<std::monostate, bool, int64_t, double,
                            std::shared_ptr<const std::string>, std::shared_ptr<const ListData>,
                            std::shared_ptr<const DictData>, std::shared_ptr<Namespace>,
                            std::shared_ptr<const Function>, std::shared_ptr<LoopState>>;
  // Constructs the alternative in place (moving a whole variant trips GCC 12's
  // -Wmaybe-uninitialized under sanitizers).
  template <typename T>
  Value(Kind kind, T&& alternative) : kind_(kind), data_(std::forward<T>(alternative)) {}

  Kind kind_ = Kind::kUndefined;
  Data data_;
};

// A Python dict: insertion-ordered; keys compare with Python == (so 1 and 1.0 are one key).
class Dict {
 public:
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);  // replaces the value in place, or appends
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::pair<Value, Value>> items_;
};

struct ListData {
  List items;
  uint64_t weight = 1;
  uint32_t depth = 1;
};
struct DictData {
  Dict dict;
  uint64_t weight = 1;
  uint32_t depth = 1;
};

struct Namespace {
  Dict attrs;
  uint32_t depth = 1;  // grows as attributes are set; never shrinks
  // Sets an attribute; Failure when it would nest values deeper than kMaxValueDepth.
  void set(const std::string& name, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Function {
  std::string name;  // for messages: "str.startswith", "macro 'm'", "range"
  std::function<Value(Evaluator&, CallArgs&)> call;
};

// jinja2's LoopContext. One per for-loop, updated as the loop advances.
struct LoopState {
  std::shared_ptr<const List> items;  // after the loop's `if` filter
  int64_t index0 = 0;
  int64_t depth0 = 0;
  bool has_changed_value = false;
  bool finished = false;  // the loop is over; changed() no longer remembers (no cycles)
  Value changed_value;    // last arguments of loop.changed()
};

// Python type name ("str", "int", "NoneType", "dict"...), for error messages.
std::string type_name(const Value& v);
bool truthy(const Value& v);
bool equals(const Value& a, const Value& b);  // Python ==
// Python's ordering of two numbers (bool, int, float): -1, 0 or 1; 2 when unordered (NaN).
int compare_numbers(const Value& a, const Value& b);

// str(v) as jinja2 prints it: undefined -> "", None -> "None", True -> "True", lists as repr.
// Throws Failure when the text would pass max_bytes.
std::string to_str(const Value& v, size_t max_bytes = SIZE_MAX);
std::string repr(const Value& v, size_t max_bytes = SIZE_MAX);

struct JsonOptions {
  std::optional<std::string> indent;  // nullopt: one line (indent=None); else the indent unit
  bool sort_keys = false;
  bool ensure_ascii = false;
  std::optional<std::pair<std::string, std::string>> separators;  // (item, key); else Python's
};
// json.dumps(v, ensure_ascii=False, ...), the `tojson` filter transformers installs. Throws
// Failure for values JSON cannot hold (undefined, namespace, functions), as Python does.
std::string to_json(const Value& v, const JsonOptions& options, size_t max_bytes = SIZE_MAX);

}  // namespace detllm::jinja
