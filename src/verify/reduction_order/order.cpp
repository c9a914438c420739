// The reduction-order expression (order.h).
#include "verify/reduction_order/order.h"

#include <fmt/format.h>

namespace detllm::reduction_order {
namespace {

const char* kind_name(Order::Kind k) {
  switch (k) {
    case Order::Kind::kAtom:
      return "atom";
    case Order::Kind::kChain:
      return "chain";
    case Order::Kind::kTree:
      return "tree";
    case Order::Kind::kExact:
      return "exact";
    case Order::Kind::kOpaque:
      return "opaque";
  }
  return "?";
}

bool is_leaf(const Order& o) {
  return o.kind != Order::Kind::kChain && o.kind != Order::Kind::kTree;
}

std::string leaf_string(const Order& o) {
  std::string s = fmt::format("{} {}[{},{})", kind_name(o.kind), o.op, o.lo, o.hi);
  if (o.valid_hi != o.hi) s += fmt::format(" valid<{}", o.valid_hi);
  return s;
}

// A full (unmasked) atom that continues a run of equal-width atoms of the same op.
bool continues_run(const Order& prev, const Order& next) {
  return prev.kind == Order::Kind::kAtom && next.kind == Order::Kind::kAtom && prev.op == next.op &&
         prev.valid_hi == prev.hi && next.valid_hi == next.hi && next.lo == prev.hi &&
         next.hi - next.lo == prev.hi - prev.lo;
}

void append(const Order& o, std::string& out) {
  if (is_leaf(o)) {
    out += leaf_string(o);
    return;
  }
  out += fmt::format("{} {}(", kind_name(o.kind), o.op);
  for (size_t i = 0; i < o.children.size();) {
    if (i > 0) out += ", ";
    size_t j = i + 1;
    while (j < o.children.size() && continues_run(o.children[j - 1], o.children[j])) ++j;
    if (j - i >= 3) {  // a run: op[lo:hi:step]
      const Order& a = o.children[i];
      out += fmt::format("atom {}[{}:{}:{}]", a.op, a.lo, o.children[j - 1].hi, a.hi - a.lo);
    } else {
      j = i + 1;
      append(o.children[i], out);
    }
    i = j;
  }
  out += ")";
}

std::string shorten(std::string s, size_t max_chars = 240) {
  if (s.size() > max_chars) s = s.substr(0, max_chars) + " …";
  return s;
}

bool diff(const Order& a, const Order& b, std::string path, std::string& out) {
  const bool same_node = a.kind == b.kind && a.op == b.op && a.lo == b.lo && a.hi == b.hi &&
                         a.valid_hi == b.valid_hi && a.children.size() == b.children.size();
  if (!same_node) {
    out = fmt::format("{}: {}  vs  {}", path.empty() ? "the whole order" : path,
                      shorten(to_string(a)), shorten(to_string(b)));
    return true;
  }
  for (size_t i = 0; i < a.children.size(); ++i)
    if (diff(a.children[i], b.children[i],
             fmt::format("{}{} '{}' child {}", path.empty() ? "" : path + " > ", kind_name(a.kind),
                         a.op, i),
             out))
      return true;
  return false;
}

}  // namespace

Order Order::atom(std::string op, int64_t lo, int64_t hi, int64_t valid_hi) {
  Order o;
  o.kind = Kind::kAtom;
  o.op = std::move(op);
  o.lo = lo;
  o.hi = hi;
  o.valid_hi = valid_hi;
  return o;
}

Order Order::chain(std::string op, std::vector<Order> children) {
  Order o;
  o.kind = Kind::kChain;
  o.op = std::move(op);
  o.children = std::move(children);
  return o;
}

Order Order::tree(std::string op, std::vector<Order> children) {
  Order o = chain(std::move(op), std::move(children));
  o.kind = Kind::kTree;
  return o;
}

Order Order::exact(std::string op, int64_t lo, int64_t hi) {
  Order o = atom(std::move(op), lo, hi);
  o.kind = Kind::kExact;
  return o;
}

Order Order::opaque(std::string op, int64_t lo, int64_t hi) {
  Order o = atom(std::move(op), lo, hi);
  o.kind = Kind::kOpaque;
  return o;
}

bool Order::operator==(const Order& o) const {
  return kind == o.kind && op == o.op && lo == o.lo && hi == o.hi && valid_hi == o.valid_hi &&
         children == o.children;
}

int64_t Order::nodes() const {
  int64_t n = 1;
  for (const Order& c : children) n += c.nodes();
  return n;
}

std::string Order::span() const {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  auto walk = [&](auto&& self, const Order& o) -> void {
    if (is_leaf(o)) {
      if (!ranges.empty() && ranges.back().second == o.lo)
        ranges.back().second = o.hi;
      else
        ranges.emplace_back(o.lo, o.hi);
      return;
    }
    for (const Order& c : o.children) self(self, c);
  };
  walk(walk, *this);
  std::string s;
  for (const auto& [lo, hi] : ranges) s += fmt::format("{}[{},{})", s.empty() ? "" : " ", lo, hi);
  return s;
}

std::string to_string(const Order& o) {
  std::string s;
  append(o, s);
  return s;
}

std::string first_difference(const Order& a, const Order& b) {
  std::string out;
  diff(a, b, "", out);
  return out;
}

}  // namespace detllm::reduction_order
