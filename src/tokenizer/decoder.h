// Decoders: turn token strings back into text, step by step, as Hugging Face's decoder chain
// does: ByteLevel (byte alphabet -> bytes, invalid UTF-8 -> U+FFFD), and the SentencePiece
// chain Replace("▁", " ") + ByteFallback (<0xNN>) + Fuse + Strip(" ", 1, 0); also Metaspace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace detllm {

struct DecoderStep {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  Kind kind = Kind::kByteLevel;
  std::string pattern;  // kReplace: literal to find
  std::string content;  // kReplace: replacement; kStrip: the code point to strip (UTF-8)
  size_t start = 0;     // kStrip: at most this many leading `content` code points
  size_t stop = 0;      // kStrip: at most this many trailing ones
  std::string replacement = "\xE2\x96\x81";  // kMetaspace
  bool prepend = true;  // kMetaspace: drop the replacement at the start of the first token
};

// A flattened Sequence of steps. Without any step, tokens are joined with spaces (HF's
// behaviour when a tokenizer.json has no decoder).
class Decoder {
 public:
  Decoder() = default;
  explicit Decoder(std::vector<DecoderStep> steps) : steps_(std::move(steps)) {}
  bool empty() const { return steps_.empty(); }
  // True when a ByteFallback step joins runs of <0xNN> tokens: a run decodes as a whole
  // (all or nothing), so a streaming decoder must not emit in the middle of one.
  bool has_byte_fallback() const;
  // Decodes token strings to valid UTF-8 text.
  std::string decode(std::vector<std::string> tokens) const;
  // The bytes one token string adds to a text in which it is not the first token, before any
  // UTF-8 repair (a byte-level or <0xNN> token may be part of a code point): what a grammar
  // engine matches. Strip steps (which act on the text's first token only) are not applied.
  std::string token_bytes(std::string_view token) const;

 private:
  std::vector<DecoderStep> steps_;
};

// The byte a "<0xNN>" token stands for (ByteFallback's test), or nullopt.
std::optional<uint8_t> byte_fallback_value(std::string_view token);

}  // namespace detllm
