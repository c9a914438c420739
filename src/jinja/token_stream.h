// Token cursor shared by the statement and expression parsers: lookahead, expectations and
// syntax errors that name line and column, plus the nesting guard that keeps hostile templates
// from exhausting the stack.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/lexer.h"

namespace detllm::jinja {

// Nesting limit for blocks, brackets and unary operators together.
inline constexpr int kMaxParseNesting = 128;

// How jinja2 names a token in "expected X, got Y" messages.
inline std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::kData:
      return "template data / text";
    case TokenType::kVariableBegin:
      return "begin of print statement '{{'";
    case TokenType::kVariableEnd:
      return "end of print statement '}}'";
    case TokenType::kBlockBegin:
      return "begin of statement block '{%'";
    case TokenType::kBlockEnd:
      return "end of statement block '%}'";
    case TokenType::kName:
    case TokenType::kOperator:
      return "'" + t.text + "'";
    case TokenType::kString:
      return "string";
    case TokenType::kInteger:
      return "integer";
    case TokenType::kFloat:
      return "float";
    case TokenType::kEof:
      return "end of template";
  }
  return "token";
}

class TokenStream {
 public:
  // `tokens` ends with kEof (see tokenize); `source` is the normalized source they index.
  TokenStream(std::string_view source, std::vector<Token> tokens)
      : src_(source), tokens_(std::move(tokens)) {}

  const Token& cur() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& advance() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  static bool is_name(const Token& t, std::string_view name) {
    return t.type == TokenType::kName && t.text == name;
  }
  static bool is_op(const Token& t, std::string_view op) {
    return t.type == TokenType::kOperator && t.text == op;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(cur(), name)) return false;
    advance();
    return true;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(cur(), op)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail(const std::string& message, size_t offset) const {
    syntax_error(src_, offset, message);
  }
  [[noreturn]] void fail_here(const std::string& message) const { fail(message, cur().offset); }

  [[noreturn]] void fail_expected(const std::string& what) const {
    if (cur().type == TokenType::kEof) fail_here("unexpected end of template, expected " + what);
    fail_here("expected " + what + ", got " + describe(cur()));
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail_expected("'" + std::string(op) + "'");
  }
  void expect_type(TokenType type, const char* what) {
    if (cur().type != type) fail_expected(what);
    advance();
  }
  void expect_name(std::string_view name) {
    if (!skip_name(name)) fail_expected("'" + std::string(name) + "'");
  }
  std::string expect_any_name() {
    if (cur().type != TokenType::kName) fail_expected("a name");
    return advance().text;
  }

  // Counts nesting of blocks, brackets and unary operators; throws past kMaxParseNesting.
  struct Nest {
    explicit Nest(TokenStream& p) : p_(p) {
      if (++p_.nesting_ > kMaxParseNesting) {
        p_.fail_here("template nested too deeply (more than " + std::to_string(kMaxParseNesting) +
                     " levels of blocks, brackets or unary operators); simplify it");
      }
    }
    ~Nest() { --p_.nesting_; }
    TokenStream& p_;
  };

 protected:
  std::string_view src_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

}  // namespace detllm::jinja
