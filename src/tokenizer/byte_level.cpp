// GPT-2's byte-level alphabet (see byte_level.h): two constant tables built once.
#include "tokenizer/byte_level.h"

#include <array>

#include "core/unicode.h"

namespace detllm::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<std::string, 256> byte_to_utf8{};
  std::array<int16_t, 324> char_to_byte{};  // code points 0..323 cover the whole alphabet

  Tables() {
    char_to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t c = printable ? static_cast<char32_t>(b) : next++;
      byte_to_char[b] = c;
      byte_to_utf8[b] = unicode::to_utf8(c);
      char_to_byte[c] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) {
  return tables().byte_to_char[b];
}

std::optional<uint8_t> char_to_byte(char32_t c) {
  const Tables& t = tables();
  if (c >= t.char_to_byte.size() || t.char_to_byte[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(t.char_to_byte[c]);
}

std::string encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(ch)];
  return out;
}

bool decode_token(std::string_view token, std::string& out) {
  const size_t mark = out.size();
  size_t i = 0;
  while (i < token.size()) {
    const std::optional<uint8_t> b = char_to_byte(unicode::next_code_point(token, i));
    if (!b) {
      out.resize(mark);
      return false;
    }
    out += static_cast<char>(*b);
  }
  return true;
}

}  // namespace detllm::byte_level
