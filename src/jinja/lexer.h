// Jinja lexer: splits template source into text and tag tokens with jinja2's exact whitespace
// rules as Hugging Face configures them (trim_blocks, lstrip_blocks, `-`/`+` markers, no
// trailing newline), because one stray space or newline changes the prompt's tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace detllm::jinja {

enum class TokenType : uint8_t {
  kData,           // template text (after whitespace control)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,    // text: the unescaped value
  kInteger,   // int_value
  kFloat,     // float_value
  kOperator,  // text: "+", "//", "(", ...
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  uint32_t offset = 0;  // byte offset in the normalized source
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
};

// What jinja2 does to source before lexing: \r\n and \r become \n, and one trailing newline
// is dropped (keep_trailing_newline=False). Offsets in tokens and errors refer to this text.
std::string normalize_source(std::string_view source);

// Tokens of normalized source, ending with kEof. Throws detllm::Error with line and column
// for bad characters, unterminated strings/comments/raw blocks and unbalanced brackets.
std::vector<Token> tokenize(std::string_view source);

// A decimal float literal (digits, '.', exponent; no sign, no '_') as Python reads it:
// correctly rounded, inf when too large, 0.0 when too small.
double parse_decimal(std::string_view digits);

struct LineCol {
  int line = 1;
  int column = 1;  // 1-based, in code points
};
LineCol locate(std::string_view source, size_t offset);
// Throws detllm::Error("chat template syntax error at line L, column C: message").
[[noreturn]] void syntax_error(std::string_view source, size_t offset, const std::string& message);

}  // namespace detllm::jinja
