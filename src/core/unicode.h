// UTF-8 and Unicode helpers for the tokenizer: validation, code point iteration, the lossy
// repair Rust's String::from_utf8_lossy does (which Hugging Face decoders rely on), Unicode
// normalization forms (ICU) and the character classes HF's Rust code tests with.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace detllm::unicode {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Byte offset of the first ill-formed byte sequence, or nullopt when `s` is valid UTF-8
// (surrogates, overlongs and code points above U+10FFFF are ill-formed).
std::optional<size_t> find_invalid_utf8(std::string_view s);

// Decodes the code point starting at s[i] and advances i. `s` must be valid UTF-8.
char32_t next_code_point(std::string_view s, size_t& i);

// Number of bytes of the UTF-8 sequence whose first byte is `lead` (1 for invalid leads).
size_t utf8_sequence_length(unsigned char lead);

void append_utf8(std::string& out, char32_t c);
inline std::string to_utf8(char32_t c) {
  std::string s;
  append_utf8(s, c);
  return s;
}

// Replaces every ill-formed sequence with U+FFFD exactly as Rust's from_utf8_lossy does: each
// maximal prefix of a valid sequence that is cut short becomes one U+FFFD, and every other bad
// byte becomes its own U+FFFD. Valid input is returned unchanged.
std::string utf8_lossy(std::string_view bytes);

// Unicode normalization forms; input must be valid UTF-8.
enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
std::string normalize(std::string_view s, NormalForm form);

// Full lowercase mapping of each code point on its own (no context rules), as Rust's
// char::to_lowercase.
std::string lowercase(std::string_view s);

// Character classes, as Rust defines them.
bool is_whitespace(char32_t c);  // char::is_whitespace and regex \s: the White_Space property
bool is_numeric(char32_t c);     // char::is_numeric: general categories Nd, Nl, No
bool is_word_char(char32_t c);   // regex \w: Alphabetic, M, Nd, Pc, Join_Control

}  // namespace detllm::unicode
