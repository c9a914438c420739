// Normalizers: rewrite each ordinary piece of text (between added tokens) before it is
// pre-tokenized. Covers the steps the supported tokenizer.json files use: Unicode forms (NFC
// for Qwen), Llama-2's Prepend("▁") + Replace(" ", "▁"), Lowercase, Strip, Sequence.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/unicode.h"
#include "tokenizer/regex.h"

namespace detllm {

struct NormalizerStep {
  enum class Kind { kUnicode, kPrepend, kReplace, kLowercase, kStrip };
  Kind kind = Kind::kUnicode;
  unicode::NormalForm form = unicode::NormalForm::kNfc;  // kUnicode
  std::string text;                                      // kPrepend: prefix; kReplace: content
  std::string literal;                                   // kReplace with a String pattern
  std::shared_ptr<const Regex> regex;                    // kReplace with a Regex pattern
  bool strip_left = false, strip_right = false;          // kStrip
};

// A flattened Sequence of steps; empty means "no normalizer".
class Normalizer {
 public:
  Normalizer() = default;
  explicit Normalizer(std::vector<NormalizerStep> steps) : steps_(std::move(steps)) {}
  bool empty() const { return steps_.empty(); }
  // Applies every step in order to `text` (valid UTF-8). If `keeps_start` is given, it is set
  // to whether the first character of the result still maps to the first character of `text`
  // (HF's alignment rules: a replaced run maps to its last character, a stripped one is gone);
  // Metaspace's prepend_scheme "first" depends on it.
  std::string normalize(std::string_view text, bool* keeps_start = nullptr) const;

 private:
  std::vector<NormalizerStep> steps_;
};

}  // namespace detllm
