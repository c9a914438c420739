// Jinja lexer (see lexer.h). A hand-written state machine that reproduces jinja2 3.1's regex
// lexer under HF's settings: text, {{ }}, {% %}, {# #} and {% raw %}, with trim_blocks (drop
// one newline after %} and #}), lstrip_blocks (drop a line's indent before {% and {#) and the
// explicit `-` (strip all whitespace) and `+` (keep it) markers.
#include "jinja/lexer.h"

#include <unicode/uchar.h>

#include <charconv>
#include <cmath>

#include "core/error.h"
#include "jinja/text.h"

namespace detllm::jinja {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool is_ascii_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

}  // namespace

double parse_decimal(std::string_view digits) {
  double v = 0.0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (r.ec == std::errc::result_out_of_range) {
    // Too large or too small for a double: Python gives inf or 0.0.
    const size_t e = digits.find_first_of("eE");
    const bool tiny = e != std::string_view::npos && e + 1 < digits.size() && digits[e + 1] == '-';
    v = tiny ? 0.0 : HUGE_VAL;
  }
  return v;
}

namespace {

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) {
      if (!root_step()) break;
    }
    push(TokenType::kEof, s_.size());
    return std::move(tokens_);
  }

 private:
  // One piece of text plus the tag after it. Returns false when the rest is plain text.
  bool root_step() {
    size_t p = pos_;
    while (true) {
      p = s_.find('{', p);
      if (p == std::string_view::npos || p + 1 >= s_.size()) {
        push_data(s_.substr(pos_));
        pos_ = s_.size();
        return false;
      }
      const char c = s_[p + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++p;
    }
    const char opener = s_[p + 1];
    const char sign = (p + 2 < s_.size() && (s_[p + 2] == '-' || s_[p + 2] == '+')) ? s_[p + 2] : 0;
    size_t raw_end = 0;
    const bool raw = opener == '%' && match_raw_tag(p, "raw", /*allow_plus_end=*/false, raw_end);
    push_data(control_whitespace(s_.substr(pos_, p - pos_), sign, /*lstrip=*/opener != '{'));
    const size_t tag_start = p;
    pos_ = p + 2 + (sign ? 1 : 0);
    if (raw) {
      line_starting_ = s_[raw_end - 1] == '\n';
      pos_ = raw_end;
      lex_raw_body(tag_start);
    } else if (opener == '#') {
      lex_comment(tag_start);
    } else {
      lex_tag(opener == '%', tag_start);
    }
    return true;
  }

  // Applies `-` (strip trailing whitespace) or lstrip_blocks (drop the indent of the tag's
  // line when only whitespace precedes the tag on it) to the text before a tag.
  std::string_view control_whitespace(std::string_view text, char sign, bool lstrip) {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0) {
        // Step back one code point; stop at the first non-whitespace one.
        size_t start = end - 1;
        while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        const std::u32string cp = text::decode(text.substr(start, end - start));
        if (cp.size() != 1 || !text::is_space(cp[0])) break;
        end = start;
      }
      return text.substr(0, end);
    }
    if (sign != '+' && lstrip) {
      const size_t nl = text.rfind('\n');
      const size_t line_start = nl == std::string_view::npos ? 0 : nl + 1;
      if ((line_start > 0 || line_starting_) && text::is_all_space(text.substr(line_start))) {
        return text.substr(0, line_start);
      }
    }
    return text;
  }

  // Matches `{%[-+]? \s* word \s* (+%} | -%}\s* | %}\n?)` at p (jinja2's raw/endraw tags; the
  // raw opener takes no `+%}` and no trim_blocks newline). Sets `end` past the match.
  bool match_raw_tag(size_t p, std::string_view word, bool allow_plus_end, size_t& end) {
    size_t q = p + 2;
    if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) ++q;
    q = skip_space(q);
    if (s_.substr(q, word.size()) != word) return false;
    q = skip_space(q + word.size());
    if (allow_plus_end && s_.substr(q, 3) == "+%}") {
      end = q + 3;
      return true;
    }
    if (s_.substr(q, 3) == "-%}") {
      end = skip_space(q + 3);
      return true;
    }
    if (s_.substr(q, 2) == "%}") {
      end = q + 2;
      if (allow_plus_end && end < s_.size() && s_[end] == '\n') ++end;  // trim_blocks
      return true;
    }
    return false;
  }

  void lex_raw_body(size_t tag_start) {
    size_t p = pos_;
    size_t end = 0;
    while (true) {
      p = s_.find("{%", p);
      if (p == std::string_view::npos) {
        syntax_error(s_, tag_start, "missing end of raw directive: add {% endraw %}");
      }
      if (match_raw_tag(p, "endraw", /*allow_plus_end=*/true, end)) break;
      ++p;
    }
    const char sign = (s_[p + 2] == '-' || s_[p + 2] == '+') ? s_[p + 2] : 0;
    push_data(control_whitespace(s_.substr(pos_, p - pos_), sign, /*lstrip=*/true));
    pos_ = end;
    line_starting_ = s_[end - 1] == '\n';
  }

  void lex_comment(size_t tag_start) {
    const size_t close = s_.find("#}", pos_);
    if (close == std::string_view::npos) {
      syntax_error(s_, tag_start, "missing end of comment tag: close the comment with #}");
    }
    const char sign =
        (close > pos_ && (s_[close - 1] == '-' || s_[close - 1] == '+')) ? s_[close - 1] : 0;
    pos_ = close + 2;
    finish_tag_end(sign, /*trim_newline=*/true);
  }

  // After an end marker (%}, }} or #}): `-` eats all following whitespace, no sign eats one
  // newline when trim_newline (trim_blocks), `+` keeps everything.
  void finish_tag_end(char sign, bool trim_newline) {
    const size_t start = pos_;
    if (sign == '-') {
      pos_ = skip_space(pos_);
    } else if (sign == 0 && trim_newline && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
    }
    line_starting_ = pos_ > start ? s_[pos_ - 1] == '\n' : false;
  }

  // Tokens inside {% ... %} (block) or {{ ... }}. End markers only count when brackets are
  // balanced, so `{{ {'a': {'b': 1}} }}` lexes as jinja2 lexes it.
  void lex_tag(bool block, size_t tag_start) {
    push(block ? TokenType::kBlockBegin : TokenType::kVariableBegin, tag_start);
    std::vector<char> closers;
    const char close_char = block ? '%' : '}';
    while (true) {
      if (pos_ >= s_.size()) return;  // the parser reports the unclosed tag
      if (closers.empty()) {
        const std::string_view rest = s_.substr(pos_);
        const char end2[3] = {close_char, '}', 0};
        if (block && rest.substr(0, 3) == "+%}") {
          push(TokenType::kBlockEnd, pos_);
          pos_ += 3;
          finish_tag_end('+', true);
          return;
        }
        if (rest.size() >= 3 && rest[0] == '-' && rest.substr(1, 2) == end2) {
          push(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, pos_);
          pos_ += 3;
          finish_tag_end('-', true);
          return;
        }
        if (rest.substr(0, 2) == end2) {
          push(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, pos_);
          pos_ += 2;
          finish_tag_end(0, /*trim_newline=*/block);
          return;
        }
      }
      lex_expression_token(closers);
    }
  }

  void lex_expression_token(std::vector<char>& closers) {
    const size_t start = pos_;
    const char c = s_[pos_];
    if (const size_t ws = skip_space(pos_); ws > pos_) {
      pos_ = ws;
      return;
    }
    if (is_digit(c)) return lex_number();
    if (is_ascii_ident_start(c) || static_cast<unsigned char>(c) >= 0x80) {
      if (lex_name()) return;
    }
    if (c == '\'' || c == '"') return lex_string();
    static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwoChar) {
      if (s_.substr(pos_, 2) == op) {
        push(TokenType::kOperator, start, std::string(op));
        pos_ += 2;
        return;
      }
    }
    static constexpr std::string_view kOneChar = "+-/*%~[](){}><=.:|,;";
    if (kOneChar.find(c) == std::string_view::npos) {
      std::string shown =
          text::string_repr(text::encode(text::decode(s_.substr(pos_, 4)).substr(0, 1)));
      syntax_error(s_, start, "unexpected character " + shown + " inside a tag");
    }
    if (c == '(' || c == '[' || c == '{') {
      closers.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    } else if (c == ')' || c == ']' || c == '}') {
      if (closers.empty()) syntax_error(s_, start, std::string("unexpected '") + c + "'");
      if (closers.back() != c) {
        syntax_error(s_, start,
                     std::string("unexpected '") + c + "', expected '" + closers.back() + "'");
      }
      closers.pop_back();
    }
    push(TokenType::kOperator, start, std::string(1, c));
    ++pos_;
  }

  // \d+(_\d+)*  -> end offset, or npos.
  size_t scan_digits(size_t p) const {
    if (p >= s_.size() || !is_digit(s_[p])) return std::string_view::npos;
    while (true) {
      while (p < s_.size() && is_digit(s_[p])) ++p;
      if (p + 1 < s_.size() && s_[p] == '_' && is_digit(s_[p + 1])) {
        ++p;
        continue;
      }
      return p;
    }
  }

  void lex_number() {
    const size_t start = pos_;
    // Float: digits ((. digits)? e[+-]? digits | . digits), not right after a '.'.
    size_t end = std::string_view::npos;
    if (start == 0 || s_[start - 1] != '.') {
      const size_t whole = scan_digits(start);
      size_t q = whole;
      if (q + 1 < s_.size() && s_[q] == '.') {
        if (const size_t frac = scan_digits(q + 1); frac != std::string_view::npos) q = frac;
      }
      if (q < s_.size() && (s_[q] == 'e' || s_[q] == 'E')) {
        size_t r = q + 1;
        if (r < s_.size() && (s_[r] == '+' || s_[r] == '-')) ++r;
        if (const size_t exp = scan_digits(r); exp != std::string_view::npos) end = exp;
      }
      if (end == std::string_view::npos && q != whole) end = q;
    }
    if (end != std::string_view::npos) {
      std::string digits;
      for (char ch : s_.substr(start, end - start)) {
        if (ch != '_') digits.push_back(ch);
      }
      Token& t = push(TokenType::kFloat, start);
      t.float_value = parse_decimal(digits);
      pos_ = end;
      return;
    }
    lex_integer();
  }

  void lex_integer() {
    const size_t start = pos_;
    int base = 10;
    size_t p = start;
    if (s_[p] == '0' && p + 1 < s_.size()) {
      const char prefix = static_cast<char>(s_[p + 1] | 0x20);
      base = prefix == 'b' ? 2 : (prefix == 'o' ? 8 : (prefix == 'x' ? 16 : 10));
    }
    const auto digit_value = [&](char ch) {
      const char lower = static_cast<char>(ch | 0x20);
      int v = is_digit(ch) ? ch - '0' : (lower >= 'a' && lower <= 'f' ? lower - 'a' + 10 : 99);
      return v < base ? v : -1;
    };
    std::string digits;
    if (base != 10) {
      // 0b/0o/0x (_? digit)+ ; without a digit it is just "0" followed by a name.
      size_t q = p + 2;
      while (q < s_.size()) {
        const size_t d = (s_[q] == '_') ? q + 1 : q;
        if (d >= s_.size() || digit_value(s_[d]) < 0) break;
        digits.push_back(s_[d]);
        q = d + 1;
      }
      if (digits.empty()) {
        base = 10;
      } else {
        p = q;
      }
    }
    if (base == 10) {
      digits.clear();
      if (s_[p] == '0') {  // 0(_?0)*
        digits.push_back('0');
        ++p;
        while (p < s_.size()) {
          const size_t d = (s_[p] == '_') ? p + 1 : p;
          if (d >= s_.size() || s_[d] != '0') break;
          p = d + 1;
        }
      } else {  // [1-9](_?\d)*
        digits.push_back(s_[p++]);
        while (p < s_.size()) {
          const size_t d = (s_[p] == '_') ? p + 1 : p;
          if (d >= s_.size() || !is_digit(s_[d])) break;
          digits.push_back(s_[d]);
          p = d + 1;
        }
      }
    }
    Token& t = push(TokenType::kInteger, start);
    const auto result =
        std::from_chars(digits.data(), digits.data() + digits.size(), t.int_value, base);
    if (result.ec != std::errc()) {
      syntax_error(s_, start,
                   "integer literal too large: the template engine uses 64-bit integers");
    }
    pos_ = p;
  }

  // Identifiers: ASCII letters, digits and '_', or Unicode XID characters.
  bool lex_name() {
    const size_t start = pos_;
    size_t p = pos_;
    bool first = true;
    while (p < s_.size()) {
      const char ch = s_[p];
      if (static_cast<unsigned char>(ch) < 0x80) {
        if (!(is_ascii_ident_start(ch) || (!first && is_digit(ch)))) break;
        ++p;
      } else {
        const std::u32string cp = text::decode(s_.substr(p, 4));
        const auto u = static_cast<UChar32>(cp[0]);
        if (!u_hasBinaryProperty(u, first ? UCHAR_XID_START : UCHAR_XID_CONTINUE)) break;
        std::string one;
        text::append_code_point(one, cp[0]);
        p += one.size();
      }
      first = false;
    }
    if (p == start) return false;
    push(TokenType::kName, start, std::string(s_.substr(start, p - start)));
    pos_ = p;
    return true;
  }

  void lex_string() {
    const size_t start = pos_;
    const char quote = s_[pos_];
    size_t p = pos_ + 1;
    while (p < s_.size() && s_[p] != quote) p += (s_[p] == '\\') ? 2 : 1;
    if (p >= s_.size()) {
      syntax_error(s_, start, std::string("unterminated string literal: add the closing ") + quote);
    }
    Token& t = push(TokenType::kString, start);
    t.text = unescape(s_.substr(start + 1, p - start - 1), start);
    pos_ = p + 1;
  }

  // Python's unicode-escape decoding, as jinja2 applies it to string literals.
  std::string unescape(std::string_view body, size_t offset) {
    std::string out;
    size_t i = 0;
    const auto hex_escape = [&](size_t digits, const char* what) {
      if (i + digits > body.size())
        syntax_error(s_, offset, std::string("truncated ") + what + " escape");
      uint32_t v = 0;
      for (size_t k = 0; k < digits; ++k) {
        const char ch = static_cast<char>(body[i + k] | 0x20);
        const int d = is_digit(body[i + k]) ? body[i + k] - '0'
                                            : (ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1);
        if (d < 0) syntax_error(s_, offset, std::string("truncated ") + what + " escape");
        v = v * 16 + static_cast<uint32_t>(d);
      }
      i += digits;
      return v;
    };
    const auto put = [&](uint32_t cp) {
      if (cp > 0x10FFFF) syntax_error(s_, offset, "illegal Unicode character in escape");
      if (cp >= 0xD800 && cp <= 0xDFFF) {
        syntax_error(s_, offset, "surrogate code point escapes are not supported");
      }
      text::append_code_point(out, cp);
    };
    while (i < body.size()) {
      const char ch = body[i++];
      if (ch != '\\') {
        out.push_back(ch);
        continue;
      }
      const char e = body[i++];
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
          put(hex_escape(2, "\\xXX"));
          break;
        case 'u':
          put(hex_escape(4, "\\uXXXX"));
          break;
        case 'U':
          put(hex_escape(8, "\\UXXXXXXXX"));
          break;
        case 'N':
          syntax_error(s_, offset,
                       "\\N{...} escapes are not supported; write the character itself");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k) {
              v = v * 8 + static_cast<uint32_t>(body[i++] - '0');
            }
            put(v);
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            // jinja2 backslash-replaces non-ASCII text before decoding escapes, so "\é" turns
            // into a backslash followed by the escape's letters ("\xe9").
            --i;
            const std::u32string cp = text::decode(body.substr(i, 4));
            std::string one;
            text::append_code_point(one, cp[0]);
            i += one.size();
            char buf[16];
            const auto c = static_cast<unsigned>(cp[0]);
            std::snprintf(buf, sizeof buf,
                          c <= 0xFF ? "\\x%02x" : (c <= 0xFFFF ? "\\u%04x" : "\\U%08x"), c);
            out += buf;
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    return out;
  }

  size_t skip_space(size_t p) const {
    while (p < s_.size()) {
      const auto b = static_cast<unsigned char>(s_[p]);
      if (b < 0x80) {
        if (!text::is_space(b)) break;
        ++p;
        continue;
      }
      const std::u32string cp = text::decode(s_.substr(p, 4));
      if (!text::is_space(cp[0])) break;
      std::string one;
      text::append_code_point(one, cp[0]);
      p += one.size();
    }
    return p;
  }

  Token& push(TokenType type, size_t offset, std::string text = {}) {
    Token t;
    t.type = type;
    t.offset = static_cast<uint32_t>(offset);
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
    return tokens_.back();
  }

  void push_data(std::string_view text) {
    if (!text.empty())
      push(TokenType::kData, static_cast<size_t>(text.data() - s_.data()), std::string(text));
  }

  std::string_view s_;
  size_t pos_ = 0;
  bool line_starting_ = true;  // the last match ended with a newline (lstrip_blocks)
  std::vector<Token> tokens_;
};

}  // namespace

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> tokenize(std::string_view source) {
  check(source.size() < (size_t{1} << 31), "chat template too large: {} bytes (limit 2 GiB)",
        source.size());
  return Lexer(source).run();
}

LineCol locate(std::string_view source, size_t offset) {
  LineCol lc;
  offset = std::min(offset, source.size());
  size_t line_start = 0;
  if (offset > 0) {
    const size_t nl = source.rfind('\n', offset - 1);
    if (nl != std::string_view::npos) line_start = nl + 1;
  }
  for (size_t i = 0; i < line_start; ++i) lc.line += source[i] == '\n';
  lc.column = static_cast<int>(text::length(source.substr(line_start, offset - line_start))) + 1;
  return lc;
}

void syntax_error(std::string_view source, size_t offset, const std::string& message) {
  const LineCol lc = locate(source, offset);
  throw Error(fmt::format("chat template syntax error at line {}, column {}: {}", lc.line,
                          lc.column, message));
}

}  // namespace detllm::jinja
