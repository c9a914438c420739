// GPT-2's byte-level alphabet: each of the 256 byte values is spelled as one printable code
// point, so byte-level BPE vocabularies are plain strings. Printable Latin-1 bytes spell
// themselves; the other 68 (controls, space, 0x7F-0xA0, 0xAD) map to U+0100.. in byte order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace detllm::byte_level {

// The code point that spells byte `b`.
char32_t byte_to_char(uint8_t b);
// The byte a code point spells, or nullopt if it is not in the alphabet.
std::optional<uint8_t> char_to_byte(char32_t c);

// Spells every byte of `bytes` (any byte string) in the alphabet; the result is UTF-8.
std::string encode(std::string_view bytes);
// Appends the bytes a token spells to `out`. Returns false (appending nothing) when some code
// point of the token is not in the alphabet. `token` must be valid UTF-8.
bool decode_token(std::string_view token, std::string& out);

}  // namespace detllm::byte_level
