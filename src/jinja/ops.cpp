// Python operator semantics for Jinja values (see ops.h). Messages copy CPython's TypeErrors so
// a template author sees the error jinja2 would have given.
#include "jinja/ops.h"

#include <cmath>
#include <string>

#include "jinja/text.h"

namespace detllm::jinja {
namespace {

[[noreturn]] void fail_undefined(const Value& v) {
  throw Failure(v.undefined_message());
}

[[noreturn]] void fail_operands(const char* symbol, const Value& a, const Value& b) {
  fail("unsupported operand type(s) for {}: '{}' and '{}'", symbol, type_name(a), type_name(b));
}

// Computes a op b with a GCC/Clang overflow builtin; Failure on overflow.
template <typename Op>
int64_t checked(Op op, int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (op(a, b, &r)) {
    fail("integer overflow in {}: the template engine computes with 64-bit integers", what);
  }
  return r;
}
constexpr auto kAddOp = [](int64_t a, int64_t b, int64_t* r) {
  return __builtin_add_overflow(a, b, r);
};
constexpr auto kSubOp = [](int64_t a, int64_t b, int64_t* r) {
  return __builtin_sub_overflow(a, b, r);
};
constexpr auto kMulOp = [](int64_t a, int64_t b, int64_t* r) {
  return __builtin_mul_overflow(a, b, r);
};

// CPython's float floor division and modulo (float_divmod).
std::pair<double, double> float_divmod(double x, double y) {
  if (y == 0.0) fail("float division by zero");
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return {floordiv, mod};
}

Value repeat(const Value& seq, int64_t times, size_t max_bytes) {
  if (times < 0) times = 0;
  const auto n = static_cast<uint64_t>(times);
  const bool empty = seq.is_string() ? seq.as_string().empty() : seq.as_list().empty();
  if (empty || n == 0) {
    if (seq.is_string()) return Value::string("");
    return seq.is_list() ? Value::list({}) : Value::tuple({});
  }
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && n > max_bytes / s.size()) {
      fail("string repetition would make text longer than the limit of {} bytes", max_bytes);
    }
    std::string out;
    out.reserve(s.size() * n);
    for (uint64_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out));
  }
  const List& items = seq.as_list();
  if (!items.empty() && n > kMaxValueWeight / items.size()) {
    fail("list repetition would hold more than {} items", kMaxValueWeight);
  }
  List out;
  out.reserve(items.size() * n);
  for (uint64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.is_list() ? Value::list(std::move(out)) : Value::tuple(std::move(out));
}

Value power(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) {
    int64_t base = a.as_int(), exp = b.as_int();
    if (exp < 0) {
      if (base == 0) fail("0.0 cannot be raised to a negative power");
      return Value::floating(std::pow(static_cast<double>(base), static_cast<double>(exp)));
    }
    int64_t result = 1;
    while (exp > 0) {
      if (exp & 1) result = checked(kMulOp, result, base, "**");
      exp >>= 1;
      if (exp > 0) base = checked(kMulOp, base, base, "**");
    }
    return Value::integer(result);
  }
  const double x = a.as_float(), y = b.as_float();
  if (x == 0.0 && y < 0) fail("0.0 cannot be raised to a negative power");
  if (x < 0 && y != std::floor(y)) {
    fail("a negative number raised to a fractional power is complex; not supported");
  }
  return Value::floating(std::pow(x, y));
}

Value arithmetic(BinaryOp op, const Value& a, const Value& b) {
  const bool ints = !a.is_float() && !b.is_float();
  if (ints) {
    const int64_t x = a.as_int(), y = b.as_int();
    switch (op) {
      case BinaryOp::kAdd:
        return Value::integer(checked(kAddOp, x, y, "+"));
      case BinaryOp::kSub:
        return Value::integer(checked(kSubOp, x, y, "-"));
      case BinaryOp::kMul:
        return Value::integer(checked(kMulOp, x, y, "*"));
      case BinaryOp::kDiv:
        if (y == 0) fail("division by zero");
        return Value::floating(static_cast<double>(x) / static_cast<double>(y));
      case BinaryOp::kFloorDiv:
      case BinaryOp::kMod: {
        if (y == 0) fail("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
          if (op == BinaryOp::kMod) return Value::integer(0);
          fail("integer overflow in //: the template engine computes with 64-bit integers");
        }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          m += y;
          q -= 1;
        }
        return Value::integer(op == BinaryOp::kMod ? m : q);
      }
      case BinaryOp::kPow:
        return power(a, b);
    }
  }
  const double x = a.as_float(), y = b.as_float();
  switch (op) {
    case BinaryOp::kAdd:
      return Value::floating(x + y);
    case BinaryOp::kSub:
      return Value::floating(x - y);
    case BinaryOp::kMul:
      return Value::floating(x * y);
    case BinaryOp::kDiv:
      if (y == 0.0) fail("float division by zero");
      return Value::floating(x / y);
    case BinaryOp::kFloorDiv:
      return Value::floating(float_divmod(x, y).first);
    case BinaryOp::kMod:
      return Value::floating(float_divmod(x, y).second);
    case BinaryOp::kPow:
      return power(a, b);
  }
  return Value();
}

// Normalizes a slice bound the way PySlice_AdjustIndices does.
int64_t slice_bound(const Value& v, int64_t length, int64_t step, bool is_start) {
  if (v.is_none()) {
    if (step > 0) return is_start ? 0 : length;
    return is_start ? length - 1 : -1;
  }
  int64_t i = v.as_int();
  if (i < 0) {
    i += length;
    if (i < 0) i = step < 0 ? -1 : 0;
  } else if (i >= length) {
    i = step < 0 ? length - 1 : length;
  }
  return i;
}

bool is_index(const Value& v) {
  return v.is_int() || v.is_bool();
}

}  // namespace

const char* op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "**";
  }
  return "?";
}

const char* op_symbol(CompareOp op) {
  switch (op) {
    case CompareOp::kEq:
      return "==";
    case CompareOp::kNe:
      return "!=";
    case CompareOp::kLt:
      return "<";
    case CompareOp::kLe:
      return "<=";
    case CompareOp::kGt:
      return ">";
    case CompareOp::kGe:
      return ">=";
    case CompareOp::kIn:
      return "in";
    case CompareOp::kNotIn:
      return "not in";
  }
  return "?";
}

Value binary(BinaryOp op, const Value& a, const Value& b, size_t max_bytes) {
  // str % anything is str.__mod__, which accepts Undefined (as jinja2 defines __getitem__).
  if (op == BinaryOp::kMod && a.is_string()) return percent_format(a.as_string(), b, max_bytes);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  const char* symbol = op_symbol(op);
  if (op == BinaryOp::kAdd) {
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > max_bytes) {
        fail("string concatenation would make text longer than the limit of {} bytes", max_bytes);
      }
      return Value::string(a.as_string() + b.as_string());
    }
    if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return a.is_list() ? Value::list(std::move(out)) : Value::tuple(std::move(out));
    }
    if (a.is_string() || a.is_sequence()) {
      fail("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a));
    }
    fail_operands(symbol, a, b);
  }
  if (op == BinaryOp::kMul) {
    const bool a_seq = a.is_string() || a.is_sequence();
    const bool b_seq = b.is_string() || b.is_sequence();
    if (a_seq && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), max_bytes);
    if (b_seq && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), max_bytes);
    if (a_seq || b_seq) {
      fail("can't multiply sequence by non-int of type '{}'", type_name(a_seq ? b : a));
    }
  }
  fail_operands(symbol, a, b);
}

Value negate(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return Value::floating(-v.as_float());
  if (v.is_number()) return Value::integer(checked(kSubOp, 0, v.as_int(), "-"));
  fail("bad operand type for unary -: '{}'", type_name(v));
}

Value unary_plus(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return v;
  if (v.is_number()) return Value::integer(v.as_int());
  fail("bad operand type for unary +: '{}'", type_name(v));
}

int order(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    const int c = compare_numbers(a, b);
    return c == 2 ? 0 : c;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return order(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  fail("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

bool compare(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::kEq:
      return equals(a, b);
    case CompareOp::kNe:
      return !equals(a, b);
    case CompareOp::kIn:
      return contains(b, a);
    case CompareOp::kNotIn:
      return !contains(b, a);
    default:
      break;
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number() && compare_numbers(a, b) == 2) return false;  // NaN
  const bool orderable = (a.is_number() && b.is_number()) || (a.is_string() && b.is_string()) ||
                         (a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple());
  if (!orderable) {
    fail("'{}' not supported between instances of '{}' and '{}'", op_symbol(op), type_name(a),
         type_name(b));
  }
  const int c = order(a, b);
  switch (op) {
    case CompareOp::kLt:
      return c < 0;
    case CompareOp::kLe:
      return c <= 0;
    case CompareOp::kGt:
      return c > 0;
    case CompareOp::kGe:
      return c >= 0;
    default:
      return false;
  }
}

bool contains(const Value& container, const Value& needle) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!needle.is_string()) {
        fail("'in <string>' requires string as left operand, not {}", type_name(needle));
      }
      return container.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      for (const Value& v : container.as_list()) {
        if (equals(v, needle)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (needle.is_list() || needle.is_dict()) fail("unhashable type: '{}'", type_name(needle));
      return container.as_dict().find(needle) != nullptr;
    default:
      fail("argument of type '{}' is not iterable", type_name(container));
  }
}

std::optional<Value> item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    const Value* v = obj.as_dict().find(key);
    if (v) return *v;
    return std::nullopt;
  }
  if (!is_index(key)) return std::nullopt;
  int64_t i = key.as_int();
  if (obj.is_sequence()) {
    const List& items = obj.as_list();
    const auto n = static_cast<int64_t>(items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return std::nullopt;
    return items[static_cast<size_t>(i)];
  }
  if (obj.is_string()) {
    const std::u32string cps = text::decode(obj.as_string());
    const auto n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return std::nullopt;
    return Value::string(text::encode(std::u32string_view(&cps[static_cast<size_t>(i)], 1)));
  }
  return std::nullopt;
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) fail("unhashable type: 'slice'");
  if (!obj.is_sequence() && !obj.is_string()) {
    fail("'{}' object is not subscriptable", type_name(obj));
  }
  for (const Value* bound : {&start, &stop, &step}) {
    if (bound->is_undefined()) fail_undefined(*bound);
    if (!bound->is_none() && !is_index(*bound)) {
      fail("slice indices must be integers or None or have an __index__ method");
    }
  }
  const int64_t stride = step.is_none() ? 1 : step.as_int();
  if (stride == 0) fail("slice step cannot be zero");
  std::u32string cps;
  const List* items = nullptr;
  int64_t n;
  if (obj.is_string()) {
    cps = text::decode(obj.as_string());
    n = static_cast<int64_t>(cps.size());
  } else {
    items = &obj.as_list();
    n = static_cast<int64_t>(items->size());
  }
  const int64_t lo = slice_bound(start, n, stride, true);
  const int64_t hi = slice_bound(stop, n, stride, false);
  std::u32string out_cps;
  List out_items;
  for (int64_t i = lo; stride > 0 ? i < hi : i > hi; i += stride) {
    if (items) {
      out_items.push_back((*items)[static_cast<size_t>(i)]);
    } else {
      out_cps.push_back(cps[static_cast<size_t>(i)]);
    }
    if ((stride > 0 && i > INT64_MAX - stride) || (stride < 0 && i < INT64_MIN - stride)) break;
  }
  if (!items) return Value::string(text::encode(out_cps));
  return obj.is_list() ? Value::list(std::move(out_items)) : Value::tuple(std::move(out_items));
}

namespace {

// One conversion of printf-style formatting: flags, width, precision and type.
struct PercentSpec {
  std::string flags;
  int64_t width = -1;
  int64_t precision = -1;
  char type = 's';
};

std::string pad(std::string text, const PercentSpec& spec) {
  const auto len = static_cast<int64_t>(text::length(text));
  if (spec.width <= len) return text;
  const auto fill = static_cast<size_t>(spec.width - len);
  if (spec.flags.find('-') != std::string::npos) {
    text.append(fill, ' ');
  } else {
    text.insert(0, fill, ' ');
  }
  return text;
}

// snprintf into a buffer sized for the result.
template <typename T>
std::string c_format(const std::string& format, T value) {
  const int n = std::snprintf(nullptr, 0, format.c_str(), value);
  if (n < 0) fail("string formatting failed");
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), format.c_str(), value);
  out.pop_back();
  return out;
}

std::string format_number(const Value& arg, const PercentSpec& spec) {
  if (!arg.is_number()) {
    fail("%{} format: a real number is required, not {}", spec.type, type_name(arg));
  }
  std::string format(1, '%');
  format.append(spec.flags);
  if (spec.width >= 0) format.append(std::to_string(spec.width));
  if (spec.precision >= 0) {
    if (spec.precision > 300) fail("%{} format: precision too large", spec.type);
    format.push_back('.');
    format.append(std::to_string(spec.precision));
  }
  switch (spec.type) {
    case 'd':
    case 'i':
    case 'u': {
      const double d = arg.as_float();
      if (arg.is_float() && !std::isfinite(d)) fail("cannot convert float to integer");
      const int64_t v = arg.is_float() ? static_cast<int64_t>(d) : arg.as_int();
      format.append("lld");
      return c_format(format, static_cast<long long>(v));
    }
    case 'x':
    case 'X':
    case 'o': {
      if (arg.is_float()) fail("%{} format: an integer is required, not float", spec.type);
      // Python writes the sign, then 0x/0o with '#', then the magnitude, padded to the width.
      const int64_t v = arg.as_int();
      const uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
      std::string digits =
          c_format(std::string("%ll") + spec.type, static_cast<unsigned long long>(mag));
      std::string prefix = v < 0 ? "-" : (spec.flags.find('+') != std::string::npos ? "+" : "");
      if (spec.flags.find('#') != std::string::npos) {
        prefix.push_back('0');
        prefix.push_back(spec.type == 'o' ? 'o' : spec.type);
      }
      const size_t len = prefix.size() + digits.size();
      if (spec.width > 0 && static_cast<size_t>(spec.width) > len) {
        const size_t fill = static_cast<size_t>(spec.width) - len;
        if (spec.flags.find('-') != std::string::npos) {
          digits.append(fill, ' ');
        } else if (spec.flags.find('0') != std::string::npos) {
          digits.insert(0, fill, '0');
        } else {
          prefix.insert(0, fill, ' ');
        }
      }
      prefix.append(digits);
      return prefix;
    }
    default:  // f F e E g G
      format.push_back(spec.type);
      return c_format(format, arg.as_float());
  }
}

}  // namespace

Value percent_format(const std::string& fmt, const Value& args, size_t max_bytes) {
  // As CPython: a tuple gives the arguments in order; any other value is the one argument, and
  // a mapping (dict, list) may also be indexed by %(name)s.
  const bool is_tuple = args.is_tuple();
  const bool is_mapping = !is_tuple && (args.is_dict() || args.is_list() || args.is_undefined());
  const List single = {args};
  const List& positional = is_tuple ? args.as_list() : single;
  size_t next = 0;
  bool used_single = false;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) fail("incomplete format");
    PercentSpec spec;
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      if (!args.is_dict()) fail("format requires a mapping");
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos) fail("incomplete format key");
      const Value* v = args.as_dict().find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (!v) fail("KeyError: '{}'", fmt.substr(i + 1, close - i - 1));
      arg = v;
      i = close + 1;
    }
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos) {
      spec.flags.push_back(fmt[i++]);
    }
    const auto number = [&]() -> int64_t {
      int64_t v = 0;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
        v = v * 10 + (fmt[i++] - '0');
        if (v > 100000) fail("format width or precision too large");
      }
      return v;
    };
    if (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') spec.width = number();
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      spec.precision = number();
    }
    if (i >= fmt.size()) fail("incomplete format");
    spec.type = fmt[i];
    if (spec.type == '%') {
      out.push_back('%');
      continue;
    }
    if (!arg) {
      if (is_tuple) {
        if (next >= positional.size()) fail("not enough arguments for format string");
        arg = &positional[next++];
      } else {
        if (used_single) fail("not enough arguments for format string");
        used_single = true;
        arg = &positional[0];
      }
    }
    switch (spec.type) {
      case 's':
      case 'r':
      case 'a': {
        std::string text = spec.type == 's' ? to_str(*arg, max_bytes) : repr(*arg, max_bytes);
        if (spec.precision >= 0) {
          const std::u32string cps = text::decode(text);
          if (static_cast<size_t>(spec.precision) < cps.size()) {
            text = text::encode(
                std::u32string_view(cps).substr(0, static_cast<size_t>(spec.precision)));
          }
        }
        out += pad(std::move(text), spec);
        break;
      }
      case 'c': {
        std::string c;
        if (arg->is_string() && text::length(arg->as_string()) == 1) {
          c = arg->as_string();
        } else if (arg->is_int() && arg->as_int() >= 0 && arg->as_int() <= 0x10FFFF) {
          text::append_code_point(c, static_cast<char32_t>(arg->as_int()));
        } else {
          fail("%c requires an int or a unicode character");
        }
        out += pad(std::move(c), spec);
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o':
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        out += format_number(*arg, spec);
        break;
      default:
        fail("unsupported format character '{}'", spec.type);
    }
    if (out.size() > max_bytes) fail("string formatting: text longer than the limit");
  }
  if (is_tuple ? next < positional.size() : (!used_single && !is_mapping)) {
    fail("not all arguments converted during string formatting");
  }
  return Value::string(std::move(out));
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return v.as_list();
    case Value::Kind::kDict: {
      List keys;
      keys.reserve(v.as_dict().size());
      for (const auto& [key, value] : v.as_dict().items()) keys.push_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (char32_t c : text::decode(v.as_string())) {
        chars.push_back(Value::string(text::encode(std::u32string_view(&c, 1))));
      }
      return chars;
    }
    default:
      fail("'{}' object is not iterable", type_name(v));
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(text::length(v.as_string()));
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.as_dict().size());
    case Value::Kind::kLoop:
      return static_cast<int64_t>(v.as_loop().items->size());
    default:
      fail("object of type '{}' has no len()", type_name(v));
  }
}

}  // namespace detllm::jinja
