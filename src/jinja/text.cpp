// Python `str` semantics over UTF-8 (see text.h). Positions and lengths count code points, as
// Python's do; case mapping and character classes come from ICU, as elsewhere in the tokenizer.
#include "jinja/text.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/unicode.h"

namespace detllm::jinja::text {
namespace {

constexpr char32_t kEscapeBase = 0xDC80;  // surrogateescape: byte b decodes to U+DC80 + b

// Decodes one code point at s[i] and advances i (an ill-formed byte becomes U+DC80 + byte).
char32_t next(std::string_view s, size_t& i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  if (lead < 0x80) {
    ++i;
    return lead;
  }
  const size_t n = unicode::utf8_sequence_length(lead);
  if (n > 1 && i + n <= s.size() && !unicode::find_invalid_utf8(s.substr(i, n))) {
    return unicode::next_code_point(s, i);
  }
  ++i;
  return kEscapeBase + lead;
}

bool is_escaped_byte(char32_t c) {
  return c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF;
}

bool in_set(char32_t c, const std::u32string& set) {
  return set.find(c) != std::u32string::npos;
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

// Code point index of byte offset `offset` in s.
int64_t code_point_index(std::string_view s, size_t offset) {
  return static_cast<int64_t>(length(s.substr(0, offset)));
}

std::string map_with_icu(std::string_view s, bool to_upper) {
  const auto map_one = [&](std::string_view piece) {
    icu::UnicodeString u =
        icu::UnicodeString::fromUTF8(icu::StringPiece(piece.data(), int32_t(piece.size())));
    if (to_upper) {
      u.toUpper(icu::Locale::getRoot());
    } else {
      u.toLower(icu::Locale::getRoot());
    }
    std::string out;
    u.toUTF8String(out);
    return out;
  };
  if (!unicode::find_invalid_utf8(s)) return map_one(s);
  // Ill-formed bytes stay as they are (Python maps the escape code points to themselves).
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const char32_t c = next(s, i);
    if (is_escaped_byte(c)) {
      out.push_back(static_cast<char>(c - kEscapeBase));
    } else {
      out += map_one(s.substr(start, i - start));
    }
  }
  return out;
}

std::string title_one(char32_t c) {
  if (is_escaped_byte(c)) return std::string(1, static_cast<char>(c - kEscapeBase));
  icu::UnicodeString u(static_cast<UChar32>(c));
  u.toTitle(nullptr, icu::Locale::getRoot(),
            U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT);
  std::string out;
  u.toUTF8String(out);
  return out;
}

bool is_cased(char32_t c) {
  return !is_escaped_byte(c) && u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED);
}

void append_hex_escape(std::string& out, const char* format, unsigned value) {
  char buf[16];
  std::snprintf(buf, sizeof buf, format, value);
  out += buf;
}

// Python's str.isprintable() for one code point: not in Cc, Cf, Cs, Co, Cn, Zl, Zp, and not
// a space separator other than ' '.
bool is_printable(char32_t c) {
  if (c == ' ') return true;
  if (is_escaped_byte(c)) return false;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

}  // namespace

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) out.push_back(next(s, i));
  return out;
}

void append_code_point(std::string& out, char32_t c) {
  if (is_escaped_byte(c)) {
    out.push_back(static_cast<char>(c - kEscapeBase));
  } else {
    unicode::append_utf8(out, c);
  }
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_code_point(out, c);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  size_t i = 0;
  while (i < s.size()) {
    next(s, i);
    ++n;
  }
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_all_space(std::string_view s) {
  if (s.empty()) return false;
  size_t i = 0;
  while (i < s.size()) {
    if (!is_space(next(s, i))) return false;
  }
  return true;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  const std::u32string cps = decode(s);
  const std::u32string set = chars ? decode(*chars) : std::u32string();
  const auto strippable = [&](char32_t c) { return chars ? in_set(c, set) : is_space(c); };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strippable(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(cps[end - 1])) --end;
  }
  return encode(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    check(!sep->empty(), "str.split: empty separator; pass a non-empty separator or none");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      parts.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < sep->size()) break;
        const size_t hit = s.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // Whitespace splitting: runs of whitespace separate words; leading/trailing runs vanish,
  // except that the unsplit remainder keeps its far side as is.
  std::u32string cps = decode(s);
  if (from_right) std::reverse(cps.begin(), cps.end());
  size_t i = 0;
  const size_t n = cps.size();
  while (true) {
    while (i < n && is_space(cps[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      std::u32string rest = cps.substr(i);
      if (from_right) std::reverse(rest.begin(), rest.end());
      parts.push_back(encode(rest));
      break;
    }
    size_t j = i;
    while (j < n && !is_space(cps[j])) ++j;
    std::u32string word = cps.substr(i, j - i);
    if (from_right) std::reverse(word.begin(), word.end());
    parts.push_back(encode(word));
    i = j;
  }
  if (from_right) std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  const std::u32string cps = decode(s);
  std::vector<std::string> lines;
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    if (!is_line_break(cps[i])) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    if (cps[i] == '\r' && end < cps.size() && cps[end] == '\n') ++end;
    const size_t keep = keepends ? end : i;
    lines.push_back(encode(std::u32string_view(cps).substr(start, keep - start)));
    start = i = end;
  }
  if (start < cps.size()) lines.push_back(encode(std::u32string_view(cps).substr(start)));
  return lines;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl,
                    int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `repl` before every code point and at the end, up to `count` times.
    const std::u32string cps = decode(s);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      append_code_point(out, c);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += repl;
    pos = hit + old.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

int64_t find(std::string_view s, std::string_view sub, bool from_right) {
  const size_t hit = from_right ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return code_point_index(s, hit);
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  size_t pos = 0;
  while ((pos = s.find(sub, pos)) != std::string_view::npos) {
    ++n;
    pos += sub.size();
  }
  return n;
}

std::string lower(std::string_view s) {
  return map_with_icu(s, /*to_upper=*/false);
}

std::string upper(std::string_view s) {
  return map_with_icu(s, /*to_upper=*/true);
}

std::string title(std::string_view s) {
  std::string out;
  bool previous_is_cased = false;
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const char32_t c = next(s, i);
    out += previous_is_cased ? lower(s.substr(start, i - start)) : title_one(c);
    previous_is_cased = is_cased(c);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  if (s.empty()) return {};
  size_t i = 0;
  const char32_t first = next(s, i);
  return title_one(first) + lower(s.substr(i));
}

bool predicate(std::string_view s, std::string_view name) {
  const std::u32string cps = decode(s);
  if (cps.empty()) return false;
  if (name == "islower" || name == "isupper") {
    const UProperty want = name == "islower" ? UCHAR_LOWERCASE : UCHAR_UPPERCASE;
    const UProperty reject = name == "islower" ? UCHAR_UPPERCASE : UCHAR_LOWERCASE;
    bool cased = false;
    for (char32_t c : cps) {
      if (is_escaped_byte(c)) continue;
      const auto u = static_cast<UChar32>(c);
      if (u_hasBinaryProperty(u, reject) || u_charType(u) == U_TITLECASE_LETTER) return false;
      if (u_hasBinaryProperty(u, want)) cased = true;
    }
    return cased;
  }
  for (char32_t c : cps) {
    const auto u = static_cast<UChar32>(c);
    const int numeric =
        is_escaped_byte(c) ? U_NT_NONE : u_getIntPropertyValue(u, UCHAR_NUMERIC_TYPE);
    const bool alpha = !is_escaped_byte(c) && u_isalpha(u);
    bool ok = false;
    if (name == "isspace") {
      ok = is_space(c);
    } else if (name == "isalpha") {
      ok = alpha;
    } else if (name == "isdigit") {
      ok = numeric == U_NT_DECIMAL || numeric == U_NT_DIGIT;
    } else if (name == "isdecimal") {
      ok = numeric == U_NT_DECIMAL;
    } else if (name == "isnumeric") {
      ok = numeric != U_NT_NONE;
    } else if (name == "isalnum") {
      ok = alpha || numeric != U_NT_NONE;
    }
    if (!ok) return false;
  }
  return true;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // Shortest round-trip digits in scientific form, e.g. "1.2345e+06", then laid out as CPython's
  // repr does: exponent notation when the decimal exponent is < -4 or >= 16.
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, result.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = sign;
  if (exponent < -4 || exponent >= 16) {
    out.push_back(digits[0]);
    if (digits.size() > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp_buf;
    return out;
  }
  const int point = exponent + 1;  // digits before the decimal point
  if (point <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-point), '0');
    out += digits;
  } else if (static_cast<size_t>(point) >= digits.size()) {
    out += digits;
    out.append(static_cast<size_t>(point) - digits.size(), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<size_t>(point));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(point), std::string::npos);
  }
  return out;
}

std::string string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  size_t i = 0;
  while (i < s.size()) {
    const char32_t c = next(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      append_hex_escape(out, "\\x%02x", static_cast<unsigned>(c));
    } else if (c < 0x7F) {
      out.push_back(static_cast<char>(c));
    } else if (is_printable(c)) {
      append_code_point(out, c);
    } else if (c <= 0xFF) {
      append_hex_escape(out, "\\x%02x", static_cast<unsigned>(c));
    } else if (c <= 0xFFFF) {
      append_hex_escape(out, "\\u%04x", static_cast<unsigned>(c));
    } else {
      append_hex_escape(out, "\\U%08x", static_cast<unsigned>(c));
    }
  }
  out.push_back(quote);
  return out;
}

std::string json_quote(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t start = i;
      const char32_t cp = next(s, i);
      if (!ensure_ascii) {
        out += s.substr(start, i - start);
      } else if (cp <= 0xFFFF) {
        append_hex_escape(out, "\\u%04x", static_cast<unsigned>(cp));
      } else {
        const char32_t v = cp - 0x10000;
        append_hex_escape(out, "\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)));
        append_hex_escape(out, "\\u%04x", static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          append_hex_escape(out, "\\u%04x", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace detllm::jinja::text
