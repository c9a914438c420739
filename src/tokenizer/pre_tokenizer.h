// Pre-tokenizers: cut each normalized piece into the words BPE runs on. Covers the steps of the
// supported tokenizer.json files: Split (a regex: GPT-2, Llama-3, Qwen2/3 patterns), ByteLevel
// (optional GPT-2 regex, then bytes spelled in the byte alphabet), Digits (SmolLM), Metaspace.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace detllm {

// What happens to a pattern match when a piece is cut (HF's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kDigits, kMetaspace };
  enum class PrependScheme { kAlways, kFirst, kNever };
  Kind kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // kSplit (a String pattern is compiled escaped)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;                       // kSplit: the non-matches are the delimiters
  bool add_prefix_space = false;             // kByteLevel
  bool use_regex = true;                     // kByteLevel: cut with the GPT-2 pattern first
  bool individual_digits = false;            // kDigits
  std::string replacement = "\xE2\x96\x81";  // kMetaspace ("▁")
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;  // kMetaspace
};

// A flattened Sequence of steps; empty means "the whole piece is one word".
class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}
  bool empty() const { return steps_.empty(); }
  // Cuts `piece` (valid UTF-8) into words, appended to `words`; empty words are dropped.
  // `at_text_start` says whether the piece begins at offset 0 of the input (Metaspace "first").
  void pre_tokenize(std::string piece, bool at_text_start, std::vector<std::string>& words) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

// GPT-2's split pattern, which ByteLevel(use_regex=true) applies.
const Regex& gpt2_split_regex();

}  // namespace detllm
