// A compiled PCRE2 pattern (UTF + UCP, JIT) for the tokenizer's split patterns. PCRE2 because
// the Llama-3 and Qwen patterns need lookahead `(?!\S)`; UCP so that \p{L} and \p{N} are
// Unicode classes. Patterns are written for Oniguruma (the engine Hugging Face uses), whose \s
// and \w differ from PCRE2's, so those escapes are rewritten to Oniguruma's sets first.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace detllm {

class Regex {
 public:
  // Compiles `pattern`; throws detllm::Error quoting the pattern and PCRE2's message.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match in `text` (valid UTF-8), left to right, as byte ranges
  // [begin, end). After an empty match the search resumes one code point further on.
  // Thread-safe: scratch state is per call.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

// Rewrites \s \S \w \W of an Oniguruma pattern as explicit classes with Oniguruma's Unicode
// meaning (\s: White_Space, which unlike PCRE2's \s excludes U+180E; \w: letters, marks,
// decimal digits, connector punctuation). Everything else is copied unchanged.
std::string translate_oniguruma_pattern(std::string_view pattern);

// Escapes every regex metacharacter of `literal` so that it matches itself.
std::string regex_escape(std::string_view literal);

}  // namespace detllm
