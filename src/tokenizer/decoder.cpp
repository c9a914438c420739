// Decoder steps (see decoder.h); each maps a list of token strings to a new list, as the HF
// decoder of the same name does in decode_chain, and the results are concatenated at the end.
#include "tokenizer/decoder.h"

#include <optional>
#include <string_view>

#include "core/strings.h"
#include "core/unicode.h"
#include "tokenizer/byte_level.h"

namespace detllm {
namespace {}  // namespace

// The byte a "<0xNN>" token stands for. Mirrors Rust's u8::from_str_radix(_, 16) on the two
// characters, which also accepts a leading '+' ("<0x+A>" is byte 10).
std::optional<uint8_t> byte_fallback_value(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const char a = token[3], b = token[4];
  if (a == '+') {
    const int v = hex(b);
    if (v < 0) return std::nullopt;
    return static_cast<uint8_t>(v);
  }
  const int hi = hex(a), lo = hex(b);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

namespace {

std::vector<std::string> decode_byte_level(std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& t : tokens) {
    if (!byte_level::decode_token(t, bytes)) bytes += t;  // not in the alphabet: raw bytes
  }
  std::vector<std::string> out;
  out.push_back(unicode::utf8_lossy(bytes));
  return out;
}

std::vector<std::string> byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string pending;  // bytes of consecutive <0xNN> tokens
  size_t pending_count = 0;
  auto flush = [&] {
    if (pending_count == 0) return;
    if (!unicode::find_invalid_utf8(pending)) {
      out.push_back(pending);
    } else {
      for (size_t k = 0; k < pending_count; ++k) out.push_back(unicode::to_utf8(0xFFFD));
    }
    pending.clear();
    pending_count = 0;
  };
  for (std::string& t : tokens) {
    if (const auto b = byte_fallback_value(t)) {
      pending += static_cast<char>(*b);
      ++pending_count;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  return out;
}

// Strips up to `start` leading and `stop` trailing copies of the code point `content`.
std::string strip(std::string_view token, std::string_view content, size_t start, size_t stop) {
  size_t begin = 0, end = token.size();
  for (size_t k = 0; k < start && !content.empty(); ++k) {
    if (token.substr(begin).rfind(content, 0) != 0) break;
    begin += content.size();
  }
  for (size_t k = 0; k < stop && !content.empty() && end >= begin + content.size(); ++k) {
    if (token.substr(end - content.size(), content.size()) != content) break;
    end -= content.size();
  }
  return std::string(token.substr(begin, end - begin));
}

}  // namespace

bool Decoder::has_byte_fallback() const {
  for (const DecoderStep& s : steps_) {
    if (s.kind == DecoderStep::Kind::kByteFallback) return true;
  }
  return false;
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  if (steps_.empty()) {
    std::string joined;
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (k) joined += ' ';
      joined += tokens[k];
    }
    return unicode::utf8_lossy(joined);
  }
  for (const DecoderStep& step : steps_) {
    switch (step.kind) {
      case DecoderStep::Kind::kByteLevel:
        tokens = decode_byte_level(tokens);
        break;
      case DecoderStep::Kind::kByteFallback:
        tokens = byte_fallback(tokens);
        break;
      case DecoderStep::Kind::kReplace:
        for (std::string& t : tokens) t = replace_all(t, step.pattern, step.content);
        break;
      case DecoderStep::Kind::kFuse: {
        std::string fused;
        for (const std::string& t : tokens) fused += t;
        tokens.assign(1, std::move(fused));
        break;
      }
      case DecoderStep::Kind::kStrip:
        for (std::string& t : tokens) t = strip(t, step.content, step.start, step.stop);
        break;
      case DecoderStep::Kind::kMetaspace:
        for (size_t k = 0; k < tokens.size(); ++k) {
          tokens[k] = replace_all(tokens[k], step.replacement,
                                  (k == 0 && step.prepend) ? std::string_view() : " ");
        }
        break;
    }
  }
  std::string text;
  for (const std::string& t : tokens) text += t;
  // Vocabulary strings from outside (a GGUF) may be ill-formed; the result never is.
  return unicode::utf8_lossy(text);
}

std::string Decoder::token_bytes(std::string_view token) const {
  std::string t(token);
  if (steps_.empty()) return " " + t;  // no decoder: tokens are joined with spaces
  for (const DecoderStep& step : steps_) {
    switch (step.kind) {
      case DecoderStep::Kind::kByteLevel: {
        std::string bytes;
        if (byte_level::decode_token(t, bytes)) t = std::move(bytes);
        break;
      }
      case DecoderStep::Kind::kByteFallback:
        if (const auto b = byte_fallback_value(t)) t.assign(1, static_cast<char>(*b));
        break;
      case DecoderStep::Kind::kReplace:
        t = replace_all(t, step.pattern, step.content);
        break;
      case DecoderStep::Kind::kMetaspace:
        t = replace_all(t, step.replacement, " ");
        break;
      case DecoderStep::Kind::kFuse:
      case DecoderStep::Kind::kStrip:
        break;
    }
  }
  return t;
}

}  // namespace detllm
