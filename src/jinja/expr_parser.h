// Expression parser for Jinja: jinja2's precedence climbing, from `x if c else y` down to
// literals, with filters, tests, calls, subscripts and slices, plus assignment targets. Shares
// the token cursor with the statement parser (parser.cpp).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "jinja/ast.h"
#include "jinja/token_stream.h"

namespace detllm::jinja {

inline constexpr uint32_t kMaxExprDepth = 256;  // height of one expression's tree

using Names = std::initializer_list<std::string_view>;

class ExprParser {
 public:
  explicit ExprParser(TokenStream& ts) : ts_(ts) {}

  // A plain variable name that may be assigned (not true/false/none).
  std::string parse_target_name();
  // Left side of set/for/with: a name, tuple of targets, or (with_namespace) `ns.attr`.
  Target parse_target(bool with_namespace, Names extra_end);
  // An expression, or a tuple when commas separate several (`{{ a, b }}`); ends before
  // }}, %}, ) or one of the names in extra_end. explicit_parens allows the empty tuple ().
  ExprPtr parse_tuple(bool with_condexpr, Names extra_end, bool explicit_parens);
  // One expression; with_condexpr=false stops before `if` (for-loop filters, if tests).
  ExprPtr parse_expression(bool with_condexpr);
  // `| name(args)` chains applied to input; with input null they apply to a block's text
  // ({% filter %}, {% set x | f %}); start_inline: the first `|` is implied.
  ExprPtr parse_filter(ExprPtr input, bool start_inline);

 private:
  using Nest = TokenStream::Nest;
  const Token& cur() const { return ts_.cur(); }
  const Token& look() const { return ts_.look(); }
  const Token& advance() { return ts_.advance(); }
  static bool is_name(const Token& t, std::string_view n) { return TokenStream::is_name(t, n); }
  static bool is_op(const Token& t, std::string_view op) { return TokenStream::is_op(t, op); }
  bool skip_name(std::string_view name) { return ts_.skip_name(name); }
  bool skip_op(std::string_view op) { return ts_.skip_op(op); }
  [[noreturn]] void fail(const std::string& m, size_t offset) const { ts_.fail(m, offset); }
  [[noreturn]] void fail_here(const std::string& m) const { ts_.fail_here(m); }
  [[noreturn]] void fail_expected(const std::string& what) const { ts_.fail_expected(what); }
  void expect_op(std::string_view op) { ts_.expect_op(op); }
  std::string expect_any_name() { return ts_.expect_any_name(); }

  ExprPtr node(ExprKind kind, size_t offset) const;
  void grow(Expr& parent, const ExprPtr& child) const;
  void add(Expr& parent, ExprPtr child) const;
  ExprPtr unary(ExprKind kind, size_t offset, ExprPtr operand) const;
  ExprPtr binary(ExprKind kind, size_t offset, ExprPtr a, ExprPtr b) const;
  void check_assignable(const Token& t) const;
  bool is_tuple_end(Names extra_end) const;
  Target parse_target_primary(bool with_namespace);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr literal(Value v, size_t offset) const;
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr object);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  std::string parse_dotted_name();
  ExprPtr parse_test(ExprPtr subject);

  TokenStream& ts_;
};

}  // namespace detllm::jinja
