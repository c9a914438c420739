// UTF-8 and Unicode helpers for the tokenizer (see unicode.h). Normalization and character
// properties come from ICU so that every code point is classified by one Unicode database.
#include "core/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include "core/error.h"

namespace detllm::unicode {
namespace {

bool is_continuation(unsigned char b) {
  return (b & 0xC0) == 0x80;
}

// Length of the longest valid prefix of a UTF-8 sequence starting at s[i] (0 when s[i] is not
// a valid lead byte), and whether the whole sequence is complete and valid. Follows the
// well-formed byte table of Unicode §3.9 (Table 3-7).
struct SequenceCheck {
  size_t valid_prefix = 0;
  bool complete = false;
};

SequenceCheck check_sequence(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {1, true};
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, false};
  }
  size_t k = 1;
  for (; k < need; ++k) {
    if (i + k >= s.size()) return {k, false};
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = (k == 1) ? (b >= lo && b <= hi) : is_continuation(b);
    if (!ok) return {k, false};
  }
  return {need, true};
}

}  // namespace

std::optional<size_t> find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const SequenceCheck c = check_sequence(s, i);
    if (!c.complete) return i;
    i += c.valid_prefix;
  }
  return std::nullopt;
}

size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 1;
}

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t n = utf8_sequence_length(b0);
  char32_t c = 0;
  switch (n) {
    case 1:
      c = b0;
      break;
    case 2:
      c = b0 & 0x1F;
      break;
    case 3:
      c = b0 & 0x0F;
      break;
    default:
      c = b0 & 0x07;
      break;
  }
  for (size_t k = 1; k < n && i + k < s.size(); ++k) {
    c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  }
  i += n;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  if (!find_invalid_utf8(bytes)) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  size_t i = 0;
  while (i < bytes.size()) {
    const SequenceCheck c = check_sequence(bytes, i);
    if (c.complete) {
      out.append(bytes.substr(i, c.valid_prefix));
      i += c.valid_prefix;
    } else {
      append_utf8(out, kReplacementChar);
      i += c.valid_prefix == 0 ? 1 : c.valid_prefix;
    }
  }
  return out;
}

std::string normalize(std::string_view s, NormalForm form) {
  bool ascii = true;
  for (char ch : s) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return std::string(s);  // every form is the identity on ASCII
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNfc:
      n = icu::Normalizer2::getNFCInstance(status);
      break;
    case NormalForm::kNfd:
      n = icu::Normalizer2::getNFDInstance(status);
      break;
    case NormalForm::kNfkc:
      n = icu::Normalizer2::getNFKCInstance(status);
      break;
    case NormalForm::kNfkd:
      n = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  check(U_SUCCESS(status) && n != nullptr, "ICU normalizer unavailable: {}", u_errorName(status));
  const icu::UnicodeString in =
      icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  const icu::UnicodeString out = n->normalize(in, status);
  check(U_SUCCESS(status), "ICU normalization failed: {}", u_errorName(status));
  std::string result;
  out.toUTF8String(result);
  return result;
}

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const char32_t c = next_code_point(s, i);
    if (c < 0x80) {
      out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
      continue;
    }
    // Full (possibly multi-code-point) mapping of this one code point, without context.
    UChar src[2];
    int32_t src_len = 0;
    U16_APPEND_UNSAFE(src, src_len, static_cast<UChar32>(c));
    UChar dst[8];
    UErrorCode status = U_ZERO_ERROR;
    const int32_t n = u_strToLower(dst, 8, src, src_len, "", &status);
    if (U_FAILURE(status)) {
      append_utf8(out, c);
      continue;
    }
    for (int32_t k = 0; k < n;) {
      UChar32 m;
      U16_NEXT_UNSAFE(dst, k, m);
      append_utf8(out, static_cast<char32_t>(m));
    }
  }
  return out;
}

bool is_whitespace(char32_t c) {
  return u_isUWhiteSpace(static_cast<UChar32>(c));
}

bool is_numeric(char32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool is_word_char(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  const int8_t t = u_charType(u);
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

}  // namespace detllm::unicode
