// Decodes the NCCL unique id from vLLM's pickled ncclUniqueId or from base64 (nccl_unique_id.h).
#include "server/nccl_unique_id.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"

namespace detllm::server {

namespace {

// The values a pickled ncclUniqueId builds on the unpickler's stack.
struct Value {
  enum Kind { kStr, kBytes, kGlobal, kDict, kTuple, kReduce, kMark } kind = kMark;
  std::string text;   // kStr, kBytes; kGlobal: the module
  std::string name;   // kGlobal: the attribute
  std::vector<Value> items;  // kTuple; kReduce: {callable, args}
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  bool done() const { return pos_ >= b_.size(); }
  size_t pos() const { return pos_; }
  uint8_t byte() {
    need(1);
    return b_[pos_++];
  }
  uint64_t uint(size_t n) {  // little-endian, n bytes
    need(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{b_[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }
  std::string bytes(uint64_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  std::string line() {
    const size_t start = pos_;
    while (pos_ < b_.size() && b_[pos_] != '\n') ++pos_;
    need(1);
    std::string s(reinterpret_cast<const char*>(b_.data() + start), pos_ - start);
    ++pos_;
    return s;
  }

 private:
  void need(uint64_t n) const {
    check(n <= b_.size() - pos_, "pickled ncclUniqueId: truncated at byte {} of {}", pos_,
          b_.size());
  }
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

Value pop(std::vector<Value>& stack, const char* op) {
  check(!stack.empty(), "pickled ncclUniqueId: {} on an empty stack", op);
  Value v = std::move(stack.back());
  stack.pop_back();
  return v;
}

std::string describe(const Value& v) {
  switch (v.kind) {
    case Value::kStr: return fmt::format("str '{}'", v.text);
    case Value::kBytes: return fmt::format("{} bytes", v.text.size());
    case Value::kGlobal: return fmt::format("{}.{}", v.text, v.name);
    case Value::kDict: return "a dict";
    case Value::kTuple: return fmt::format("a {}-tuple", v.items.size());
    case Value::kReduce: return "a call";
    case Value::kMark: return "a mark";
  }
  return "?";
}

// The unpickler's stack machine over the opcodes of `pickle.dumps(ncclUniqueId())` at
// protocols 3 to 5 (Python's default is 4, or 5 from 3.14).
Value unpickle(std::span<const uint8_t> data) {
  Reader r(data);
  std::vector<Value> stack;
  std::map<uint64_t, Value> memo;
  auto str = [&](uint64_t n) { stack.push_back({Value::kStr, r.bytes(n), "", {}}); };
  auto bin = [&](uint64_t n) { stack.push_back({Value::kBytes, r.bytes(n), "", {}}); };
  auto tuple_of = [&](size_t n) {
    check(stack.size() >= n, "pickled ncclUniqueId: TUPLE{} on a stack of {}", n, stack.size());
    Value t{Value::kTuple, "", "", {}};
    t.items.assign(std::make_move_iterator(stack.end() - static_cast<std::ptrdiff_t>(n)),
                   std::make_move_iterator(stack.end()));
    stack.resize(stack.size() - n);
    stack.push_back(std::move(t));
  };
  auto put = [&](uint64_t i) {
    check(!stack.empty(), "pickled ncclUniqueId: memo put on an empty stack");
    memo[i] = stack.back();
  };
  auto get = [&](uint64_t i) {
    const auto it = memo.find(i);
    check(it != memo.end(), "pickled ncclUniqueId: memo {} read before it was written", i);
    stack.push_back(it->second);
  };
  while (true) {
    const size_t at = r.pos();
    const uint8_t op = r.byte();
    switch (op) {
      case 0x80: r.byte(); break;                        // PROTO
      case 0x95: r.uint(8); break;                       // FRAME
      case 0x8c: str(r.uint(1)); break;                  // SHORT_BINUNICODE
      case 'X': str(r.uint(4)); break;                   // BINUNICODE
      case 0x8d: str(r.uint(8)); break;                  // BINUNICODE8
      case 'C': bin(r.uint(1)); break;                   // SHORT_BINBYTES
      case 'B': bin(r.uint(4)); break;                   // BINBYTES
      case 0x8e: bin(r.uint(8)); break;                  // BINBYTES8
      case 0x94: put(memo.size()); break;                // MEMOIZE
      case 'q': put(r.uint(1)); break;                   // BINPUT
      case 'r': put(r.uint(4)); break;                   // LONG_BINPUT
      case 'h': get(r.uint(1)); break;                   // BINGET
      case 'j': get(r.uint(4)); break;                   // LONG_BINGET
      case '}': stack.push_back({Value::kDict, "", "", {}}); break;   // EMPTY_DICT
      case ')': stack.push_back({Value::kTuple, "", "", {}}); break;  // EMPTY_TUPLE
      case '(': stack.push_back({Value::kMark, "", "", {}}); break;   // MARK
      case 0x85: tuple_of(1); break;                     // TUPLE1
      case 0x86: tuple_of(2); break;                     // TUPLE2
      case 0x87: tuple_of(3); break;                     // TUPLE3
      case 't': {                                        // TUPLE (to the mark)
        size_t m = stack.size();
        while (m > 0 && stack[m - 1].kind != Value::kMark) --m;
        check(m > 0, "pickled ncclUniqueId: TUPLE without a mark");
        Value t{Value::kTuple, "", "", {}};
        t.items.assign(std::make_move_iterator(stack.begin() + static_cast<std::ptrdiff_t>(m)),
                       std::make_move_iterator(stack.end()));
        stack.resize(m - 1);
        stack.push_back(std::move(t));
        break;
      }
      case 0x93: {                                       // STACK_GLOBAL
        Value name = pop(stack, "STACK_GLOBAL");
        Value module = pop(stack, "STACK_GLOBAL");
        check(name.kind == Value::kStr && module.kind == Value::kStr,
              "pickled ncclUniqueId: STACK_GLOBAL of {} and {}", describe(module), describe(name));
        stack.push_back({Value::kGlobal, module.text, name.text, {}});
        break;
      }
      case 'c': {                                        // GLOBAL
        std::string module = r.line();
        std::string name = r.line();
        stack.push_back({Value::kGlobal, std::move(module), std::move(name), {}});
        break;
      }
      case 'R': {                                        // REDUCE
        Value args = pop(stack, "REDUCE");
        Value fn = pop(stack, "REDUCE");
        Value call{Value::kReduce, "", "", {}};
        call.items.push_back(std::move(fn));
        call.items.push_back(std::move(args));
        stack.push_back(std::move(call));
        break;
      }
      case '.':                                          // STOP
        check(stack.size() == 1, "pickled ncclUniqueId: {} values left at STOP", stack.size());
        return std::move(stack.back());
      default:
        throw_error("pickled ncclUniqueId: opcode 0x{:02x} at byte {} is not one a pickled "
                    "ncclUniqueId (protocol 3 to 5) uses", op, at);
    }
  }
}

}  // namespace

NcclUniqueId unique_id_from_pickle(std::span<const uint8_t> pickled) {
  const Value v = unpickle(pickled);
  // _ctypes._unpickle(<module>.ncclUniqueId, ({}, <128 bytes>))
  auto shape_error = [&](const std::string& what) {
    throw_error("the pickled value is not vLLM's ncclUniqueId "
                "(_ctypes._unpickle(ncclUniqueId, ({{}}, 128 bytes))): {}", what);
  };
  if (v.kind != Value::kReduce) shape_error("it is " + describe(v));
  const Value& fn = v.items[0];
  const Value& args = v.items[1];
  if (fn.kind != Value::kGlobal || fn.text != "_ctypes" || fn.name != "_unpickle") {
    shape_error("it calls " + describe(fn));
  }
  if (args.kind != Value::kTuple || args.items.size() != 2) shape_error("its arguments are " + describe(args));
  const Value& cls = args.items[0];
  if (cls.kind != Value::kGlobal || cls.name != "ncclUniqueId") {
    shape_error("its class is " + describe(cls));
  }
  const Value& state = args.items[1];
  if (state.kind != Value::kTuple || state.items.size() != 2 ||
      state.items[1].kind != Value::kBytes) {
    shape_error("its state is " + describe(state));
  }
  const std::string& raw = state.items[1].text;
  check(raw.size() == kNcclUniqueIdBytes, "the pickled ncclUniqueId holds {} bytes, not {}",
        raw.size(), kNcclUniqueIdBytes);
  NcclUniqueId id{};
  std::memcpy(id.data(), raw.data(), id.size());
  return id;
}

NcclUniqueId unique_id_from_base64(std::string_view b64) {
  auto sextet = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  check(b64.size() % 4 == 0, "nccl_unique_id_b64 is not standard base64 (its length {} is not "
        "a multiple of 4)", b64.size());
  std::vector<uint8_t> out;
  for (size_t i = 0; i < b64.size(); i += 4) {
    int s[4];
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = b64[i + k];
      if (c == '=' && i + 4 == b64.size() && k >= 2) {
        s[k] = 0;
        ++pad;
        continue;
      }
      check(pad == 0 && (s[k] = sextet(c)) >= 0, "nccl_unique_id_b64 is not standard base64 "
            "(character '{}' at {}; URL-safe base64 is not accepted)", c, i + k);
    }
    const uint32_t w = (uint32_t(s[0]) << 18) | (uint32_t(s[1]) << 12) | (uint32_t(s[2]) << 6) |
                       uint32_t(s[3]);
    out.push_back(static_cast<uint8_t>(w >> 16));
    if (pad < 2) out.push_back(static_cast<uint8_t>(w >> 8));
    if (pad < 1) out.push_back(static_cast<uint8_t>(w));
  }
  check(out.size() == kNcclUniqueIdBytes, "nccl_unique_id_b64 decodes to {} bytes, not {}",
        out.size(), kNcclUniqueIdBytes);
  NcclUniqueId id{};
  std::memcpy(id.data(), out.data(), id.size());
  return id;
}

}  // namespace detllm::server
