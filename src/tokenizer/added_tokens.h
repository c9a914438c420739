// Added and special tokens (`added_tokens` in tokenizer.json): text is cut on them before the
// normalizer and the model see it, exactly as Hugging Face's AddedVocabulary does — leftmost-
// longest matching, then the single_word, lstrip and rstrip rules of each token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace detllm {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;  // match only when not inside a word
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // the match swallows whitespace on its right
  bool normalized = false;   // matched against the normalized text instead of the raw text
  bool special = false;      // skipped by decode(skip_special_tokens=true)
};

// One piece of a cut text: a byte range of the text, and the id of the added token it is, or
// -1 for ordinary text.
struct TextSplit {
  size_t begin = 0;
  size_t end = 0;
  int32_t added_id = -1;
};

class AddedTokenMatcher {
 public:
  // `tokens` are the tokens to look for; `patterns[i]` is the string to find for tokens[i]
  // (its content, or its normalized content for normalized tokens).
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);
  ~AddedTokenMatcher();
  AddedTokenMatcher(AddedTokenMatcher&&) noexcept;
  AddedTokenMatcher& operator=(AddedTokenMatcher&&) noexcept;

  bool empty() const;
  // Cuts `text` (valid UTF-8) into ordinary pieces and added tokens, in order, covering the
  // whole text. An empty text gives one empty ordinary piece.
  std::vector<TextSplit> split(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace detllm
