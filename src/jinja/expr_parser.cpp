// Expression parser (see expr_parser.h). Lowest to highest precedence, as jinja2 3.1 parses:
// `x if c else y`, or, and, not, comparisons/in/not in, + -, ~, * / // %, **, unary - +, then
// postfix (.attr, [item], call) with filters (|) and tests (is). Nodes record their height so
// long left-leaning chains are refused before they can exhaust the evaluator's stack.
#include "jinja/expr_parser.h"

#include <algorithm>

namespace detllm::jinja {

ExprPtr ExprParser::node(ExprKind kind, size_t offset) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->offset = static_cast<uint32_t>(offset);
  return e;
}

void ExprParser::grow(Expr& parent, const ExprPtr& child) const {
  if (!child) return;
  parent.depth = std::max(parent.depth, child->depth + 1);
  if (parent.depth > kMaxExprDepth) {
    fail("expression nested too deeply (tree height over " + std::to_string(kMaxExprDepth) +
             "); split it with {% set %}",
         parent.offset);
  }
}

void ExprParser::add(Expr& parent, ExprPtr child) const {
  grow(parent, child);
  parent.items.push_back(std::move(child));
}

ExprPtr ExprParser::unary(ExprKind kind, size_t offset, ExprPtr operand) const {
  ExprPtr e = node(kind, offset);
  add(*e, std::move(operand));
  return e;
}

ExprPtr ExprParser::binary(ExprKind kind, size_t offset, ExprPtr a, ExprPtr b) const {
  ExprPtr e = node(kind, offset);
  add(*e, std::move(a));
  add(*e, std::move(b));
  return e;
}

std::string ExprParser::parse_target_name() {
  if (cur().type != TokenType::kName) fail_expected("a name");
  check_assignable(cur());
  return advance().text;
}

void ExprParser::check_assignable(const Token& t) const {
  static constexpr std::string_view kConstants[] = {"true", "false", "none",
                                                    "True", "False", "None"};
  for (std::string_view c : kConstants) {
    if (t.text == c) fail("can't assign to the constant '" + t.text + "'", t.offset);
  }
}

bool ExprParser::is_tuple_end(Names extra_end) const {
  const Token& t = cur();
  if (t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd || is_op(t, ")")) {
    return true;
  }
  for (std::string_view name : extra_end) {
    if (is_name(t, name)) return true;
  }
  return false;
}

Target ExprParser::parse_target(bool with_namespace, Names extra_end) {
  Target tuple;
  tuple.kind = Target::Kind::kTuple;
  tuple.offset = cur().offset;
  bool is_tuple = false;
  while (true) {
    if (!tuple.items.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    tuple.items.push_back(parse_target_primary(with_namespace));
    if (!is_op(cur(), ",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (tuple.items.empty()) fail_expected("an assignment target");
    return std::move(tuple.items[0]);
  }
  return tuple;
}

Target ExprParser::parse_target_primary(bool with_namespace) {
  Nest nest(ts_);
  Target t;
  t.offset = cur().offset;
  if (cur().type == TokenType::kName) {
    t.name = parse_target_name();
    if (with_namespace && skip_op(".")) {
      t.kind = Target::Kind::kNamespaceAttr;
      t.attr = expect_any_name();
    }
    return t;
  }
  if (skip_op("(")) {
    Target inner = parse_target(with_namespace, {});
    expect_op(")");
    if (inner.kind == Target::Kind::kNamespaceAttr) {
      fail("can't assign to a namespace attribute inside a tuple", inner.offset);
    }
    return inner;
  }
  fail_here("can't assign to " + describe(cur()) + ": expected a variable name");
}

ExprPtr ExprParser::parse_tuple(bool with_condexpr, Names extra_end, bool explicit_parens) {
  const size_t offset = cur().offset;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    items.push_back(parse_expression(with_condexpr));
    if (!is_op(cur(), ",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail_expected("an expression");
  }
  ExprPtr e = node(ExprKind::kTuple, offset);
  for (auto& item : items) add(*e, std::move(item));
  return e;
}

ExprPtr ExprParser::parse_expression(bool with_condexpr) {
  Nest nest(ts_);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr ExprParser::parse_condexpr() {
  size_t offset = cur().offset;
  ExprPtr e = parse_or();
  while (skip_name("if")) {
    ExprPtr test = parse_or();
    ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
    ExprPtr c = node(ExprKind::kCondition, offset);
    add(*c, std::move(e));
    add(*c, std::move(test));
    grow(*c, otherwise);
    c->items.push_back(std::move(otherwise));
    e = std::move(c);
    offset = cur().offset;
  }
  return e;
}

ExprPtr ExprParser::parse_or() {
  ExprPtr e = parse_and();
  while (is_name(cur(), "or")) {
    const size_t offset = advance().offset;
    e = binary(ExprKind::kOr, offset, std::move(e), parse_and());
  }
  return e;
}

ExprPtr ExprParser::parse_and() {
  ExprPtr e = parse_not();
  while (is_name(cur(), "and")) {
    const size_t offset = advance().offset;
    e = binary(ExprKind::kAnd, offset, std::move(e), parse_not());
  }
  return e;
}

ExprPtr ExprParser::parse_not() {
  if (is_name(cur(), "not")) {
    Nest nest(ts_);
    const size_t offset = advance().offset;
    return unary(ExprKind::kNot, offset, parse_not());
  }
  return parse_compare();
}

ExprPtr ExprParser::parse_compare() {
  const size_t offset = cur().offset;
  ExprPtr first = parse_math1();
  ExprPtr e;
  while (true) {
    CompareOp op;
    const Token& t = cur();
    if (is_op(t, "=="))
      op = CompareOp::kEq;
    else if (is_op(t, "!="))
      op = CompareOp::kNe;
    else if (is_op(t, "<"))
      op = CompareOp::kLt;
    else if (is_op(t, "<="))
      op = CompareOp::kLe;
    else if (is_op(t, ">"))
      op = CompareOp::kGt;
    else if (is_op(t, ">="))
      op = CompareOp::kGe;
    else if (is_name(t, "in"))
      op = CompareOp::kIn;
    else if (is_name(t, "not") && is_name(look(), "in")) {
      op = CompareOp::kNotIn;
      advance();
    } else {
      break;
    }
    advance();
    if (!e) {
      e = node(ExprKind::kCompare, offset);
      add(*e, std::move(first));
    }
    e->compare_ops.push_back(op);
    add(*e, parse_math1());
  }
  return e ? std::move(e) : std::move(first);
}

ExprPtr ExprParser::parse_math1() {
  ExprPtr e = parse_concat();
  while (is_op(cur(), "+") || is_op(cur(), "-")) {
    const Token& t = advance();
    const BinaryOp op = t.text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
    e = binary(ExprKind::kBinary, t.offset, std::move(e), parse_concat());
    e->binary_op = op;
  }
  return e;
}

ExprPtr ExprParser::parse_concat() {
  const size_t offset = cur().offset;
  ExprPtr first = parse_math2();
  if (!is_op(cur(), "~")) return first;
  ExprPtr e = node(ExprKind::kConcat, offset);
  add(*e, std::move(first));
  while (skip_op("~")) add(*e, parse_math2());
  return e;
}

ExprPtr ExprParser::parse_math2() {
  ExprPtr e = parse_pow();
  while (true) {
    BinaryOp op;
    if (is_op(cur(), "*"))
      op = BinaryOp::kMul;
    else if (is_op(cur(), "/"))
      op = BinaryOp::kDiv;
    else if (is_op(cur(), "//"))
      op = BinaryOp::kFloorDiv;
    else if (is_op(cur(), "%"))
      op = BinaryOp::kMod;
    else
      break;
    const size_t offset = advance().offset;
    e = binary(ExprKind::kBinary, offset, std::move(e), parse_pow());
    e->binary_op = op;
  }
  return e;
}

ExprPtr ExprParser::parse_pow() {
  ExprPtr e = parse_unary(true);
  while (is_op(cur(), "**")) {
    const size_t offset = advance().offset;
    e = binary(ExprKind::kBinary, offset, std::move(e), parse_unary(true));
    e->binary_op = BinaryOp::kPow;
  }
  return e;
}

ExprPtr ExprParser::parse_unary(bool with_filter) {
  ExprPtr e;
  if (is_op(cur(), "-") || is_op(cur(), "+")) {
    Nest nest(ts_);
    const Token& t = advance();
    const ExprKind kind = t.text == "-" ? ExprKind::kNeg : ExprKind::kPos;
    e = unary(kind, t.offset, parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr ExprParser::literal(Value v, size_t offset) const {
  ExprPtr e = node(ExprKind::kLiteral, offset);
  e->value = std::move(v);
  return e;
}

ExprPtr ExprParser::parse_primary() {
  const Token& t = cur();
  const size_t offset = t.offset;
  switch (t.type) {
    case TokenType::kName: {
      const std::string name = advance().text;
      if (name == "true" || name == "True") return literal(Value::boolean(true), offset);
      if (name == "false" || name == "False") return literal(Value::boolean(false), offset);
      if (name == "none" || name == "None") return literal(Value::none(), offset);
      ExprPtr e = node(ExprKind::kName, offset);
      e->name = name;
      return e;
    }
    case TokenType::kString: {
      std::string s;
      while (cur().type == TokenType::kString) s += advance().text;
      return literal(Value::string(std::move(s)), offset);
    }
    case TokenType::kInteger:
      return literal(Value::integer(advance().int_value), offset);
    case TokenType::kFloat:
      return literal(Value::floating(advance().float_value), offset);
    default:
      break;
  }
  if (skip_op("(")) {
    ExprPtr e = parse_tuple(true, {}, true);
    expect_op(")");
    return e;
  }
  if (is_op(t, "[")) return parse_list();
  if (is_op(t, "{")) return parse_dict();
  fail_here("unexpected " + describe(t) + ": expected a value (name, literal, ( [ or {)");
}

ExprPtr ExprParser::parse_list() {
  Nest nest(ts_);
  ExprPtr e = node(ExprKind::kList, advance().offset);
  while (!is_op(cur(), "]")) {
    if (!e->items.empty()) expect_op(",");
    if (is_op(cur(), "]")) break;
    add(*e, parse_expression(true));
  }
  expect_op("]");
  return e;
}

ExprPtr ExprParser::parse_dict() {
  Nest nest(ts_);
  ExprPtr e = node(ExprKind::kDict, advance().offset);
  while (!is_op(cur(), "}")) {
    if (!e->items.empty()) expect_op(",");
    if (is_op(cur(), "}")) break;
    add(*e, parse_expression(true));
    expect_op(":");
    add(*e, parse_expression(true));
  }
  expect_op("}");
  return e;
}

ExprPtr ExprParser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(cur(), ".") || is_op(cur(), "[")) {
      e = parse_subscript(std::move(e));
    } else if (is_op(cur(), "(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr ExprParser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op(cur(), "|")) {
      e = parse_filter(std::move(e), false);
    } else if (is_name(cur(), "is")) {
      e = parse_test(std::move(e));
    } else if (is_op(cur(), "(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr ExprParser::parse_subscript(ExprPtr object) {
  const Token& t = advance();
  const size_t offset = t.offset;
  if (t.text == ".") {
    const Token& attr = cur();
    if (attr.type == TokenType::kName) {
      ExprPtr e = node(ExprKind::kGetAttr, offset);
      e->name = advance().text;
      add(*e, std::move(object));
      return e;
    }
    if (attr.type != TokenType::kInteger) fail_expected("an attribute name or number after '.'");
    ExprPtr e = node(ExprKind::kGetItem, offset);
    add(*e, std::move(object));
    add(*e, literal(Value::integer(advance().int_value), attr.offset));
    return e;
  }
  Nest nest(ts_);
  std::vector<ExprPtr> args;
  while (!is_op(cur(), "]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  if (args.size() == 1 && args[0]->kind == ExprKind::kSlice) {
    ExprPtr slice = std::move(args[0]);
    grow(*slice, object);
    slice->items[0] = std::move(object);
    return slice;
  }
  ExprPtr e = node(ExprKind::kGetItem, offset);
  add(*e, std::move(object));
  if (args.size() == 1) {
    add(*e, std::move(args[0]));
  } else {
    ExprPtr tuple = node(ExprKind::kTuple, offset);
    for (auto& a : args) {
      if (a->kind == ExprKind::kSlice)
        fail("slices inside a tuple subscript are not supported", a->offset);
      add(*tuple, std::move(a));
    }
    add(*e, std::move(tuple));
  }
  return e;
}

// One subscript: an expression, or a slice start:stop:step (returned as kSlice whose
// items[0], the object, is filled in by the caller).
ExprPtr ExprParser::parse_subscribed() {
  const size_t offset = cur().offset;
  std::vector<ExprPtr> bounds;
  if (skip_op(":")) {
    bounds.push_back(nullptr);
  } else {
    ExprPtr e = parse_expression(true);
    if (!skip_op(":")) return e;
    bounds.push_back(std::move(e));
  }
  const auto at_end = [&] { return is_op(cur(), "]") || is_op(cur(), ","); };
  if (is_op(cur(), ":") || at_end()) {
    bounds.push_back(nullptr);
  } else {
    bounds.push_back(parse_expression(true));
  }
  if (skip_op(":")) {
    bounds.push_back(at_end() ? nullptr : parse_expression(true));
  } else {
    bounds.push_back(nullptr);
  }
  ExprPtr s = node(ExprKind::kSlice, offset);
  s->items.push_back(nullptr);
  for (auto& b : bounds) {
    grow(*s, b);
    s->items.push_back(std::move(b));
  }
  return s;
}

void ExprParser::parse_call_args(Expr& e) {
  const size_t offset = cur().offset;
  expect_op("(");
  Nest nest(ts_);
  const auto ensure = [&](bool ok) {
    if (!ok) fail("invalid syntax for function call expression", offset);
  };
  bool require_comma = false;
  while (!is_op(cur(), ")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(cur(), ")")) break;
    }
    if (skip_op("*")) {
      ensure(!e.dyn_args && !e.dyn_kwargs);
      e.dyn_args = parse_expression(true);
      grow(e, e.dyn_args);
    } else if (skip_op("**")) {
      ensure(!e.dyn_kwargs);
      e.dyn_kwargs = parse_expression(true);
      grow(e, e.dyn_kwargs);
    } else if (cur().type == TokenType::kName && is_op(look(), "=")) {
      ensure(!e.dyn_kwargs);
      std::string key = advance().text;
      advance();
      ExprPtr value = parse_expression(true);
      grow(e, value);
      e.kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      ensure(!e.dyn_args && !e.dyn_kwargs && e.kwargs.empty());
      add(e, parse_expression(true));
    }
    require_comma = true;
  }
  expect_op(")");
}

ExprPtr ExprParser::parse_call(ExprPtr callee) {
  ExprPtr e = node(ExprKind::kCall, callee->offset);
  add(*e, std::move(callee));
  parse_call_args(*e);
  return e;
}

std::string ExprParser::parse_dotted_name() {
  std::string name = expect_any_name();
  while (skip_op(".")) {
    name.push_back('.');
    name += expect_any_name();
  }
  return name;
}

// `| name(args)` chains; with input null the chain applies to a block's output.
ExprPtr ExprParser::parse_filter(ExprPtr input, bool start_inline) {
  while (is_op(cur(), "|") || start_inline) {
    if (!start_inline) advance();
    start_inline = false;
    ExprPtr e = node(ExprKind::kFilter, cur().offset);
    e->name = parse_dotted_name();
    grow(*e, input);
    e->items.push_back(std::move(input));
    if (is_op(cur(), "(")) parse_call_args(*e);
    input = std::move(e);
  }
  return input;
}

ExprPtr ExprParser::parse_test(ExprPtr subject) {
  const size_t offset = advance().offset;  // 'is'
  const bool negated = skip_name("not");
  ExprPtr e = node(ExprKind::kTest, offset);
  e->name = parse_dotted_name();
  add(*e, std::move(subject));
  const Token& t = cur();
  if (is_op(t, "(")) {
    parse_call_args(*e);
  } else if ((t.type == TokenType::kName || t.type == TokenType::kString ||
              t.type == TokenType::kInteger || t.type == TokenType::kFloat || is_op(t, "[") ||
              is_op(t, "{")) &&
             !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
    if (is_name(t, "is")) fail_here("you cannot chain multiple tests with is");
    add(*e, parse_postfix(parse_primary()));
  }
  if (negated) return unary(ExprKind::kNot, offset, std::move(e));
  return e;
}

}  // namespace detllm::jinja
