// Cutting text on added tokens (see added_tokens.h). A byte trie finds leftmost-longest,
// non-overlapping matches (what HF's Aho-Corasick automaton with MatchKind::LeftmostLongest
// returns); each match is then kept, dropped or widened by its token's flags.
#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <array>

#include "core/unicode.h"

namespace detllm {
namespace {

// Unicode class of the code point that ends text[0..end) / starts text[begin..).
char32_t last_code_point(std::string_view text, size_t end) {
  size_t i = end;
  do {
    --i;
  } while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80);
  return unicode::next_code_point(text, i);
}

bool ends_with_word(std::string_view text, size_t end) {
  return end > 0 && unicode::is_word_char(last_code_point(text, end));
}

bool starts_with_word(std::string_view text, size_t begin) {
  if (begin >= text.size()) return false;
  return unicode::is_word_char(unicode::next_code_point(text, begin));
}

// Start of the run of whitespace that ends at `end`.
size_t whitespace_run_start(std::string_view text, size_t end) {
  size_t i = end;
  while (i > 0) {
    size_t j = i;
    do {
      --j;
    } while (j > 0 && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80);
    size_t k = j;
    if (!unicode::is_whitespace(unicode::next_code_point(text, k))) break;
    i = j;
  }
  return i;
}

// End of the run of whitespace that starts at `begin`.
size_t whitespace_run_end(std::string_view text, size_t begin) {
  size_t i = begin;
  while (i < text.size()) {
    size_t k = i;
    if (!unicode::is_whitespace(unicode::next_code_point(text, k))) break;
    i = k;
  }
  return i;
}

}  // namespace

struct AddedTokenMatcher::Impl {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                 // index into tokens, or -1
  };
  std::vector<AddedToken> tokens;
  std::vector<Node> nodes;  // nodes[0] is the root
  std::array<bool, 256> first_byte{};

  int32_t child(int32_t node, uint8_t b) const {
    const auto& c = nodes[node].children;
    auto it = std::lower_bound(c.begin(), c.end(), std::make_pair(b, int32_t{-1}));
    return (it != c.end() && it->first == b) ? it->second : -1;
  }

  void insert(std::string_view pattern, int32_t token) {
    int32_t node = 0;
    for (char ch : pattern) {
      const auto b = static_cast<uint8_t>(ch);
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(nodes.size());
        nodes.emplace_back();
        auto& c = nodes[node].children;
        c.insert(std::lower_bound(c.begin(), c.end(), std::make_pair(b, int32_t{-1})), {b, next});
      }
      node = next;
    }
    // The first token given a pattern keeps it (tokens are listed special ones first, as HF).
    if (nodes[node].token < 0) nodes[node].token = token;
  }

  // Longest pattern that starts at text[pos]: (length, token index) or (0, -1).
  std::pair<size_t, int32_t> longest_at(std::string_view text, size_t pos) const {
    size_t best_len = 0;
    int32_t best = -1;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      if (nodes[node].token >= 0) {
        best_len = i + 1 - pos;
        best = nodes[node].token;
      }
    }
    return {best_len, best};
  }
};

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens,
                                     std::vector<std::string> patterns)
    : impl_(std::make_unique<Impl>()) {
  impl_->tokens = std::move(tokens);
  impl_->nodes.emplace_back();
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (patterns[i].empty()) continue;  // HF never matches an empty token
    impl_->insert(patterns[i], static_cast<int32_t>(i));
    impl_->first_byte[static_cast<uint8_t>(patterns[i][0])] = true;
  }
}

AddedTokenMatcher::~AddedTokenMatcher() = default;
AddedTokenMatcher::AddedTokenMatcher(AddedTokenMatcher&&) noexcept = default;
AddedTokenMatcher& AddedTokenMatcher::operator=(AddedTokenMatcher&&) noexcept = default;

bool AddedTokenMatcher::empty() const {
  return impl_->nodes[0].children.empty();
}

std::vector<TextSplit> AddedTokenMatcher::split(std::string_view text) const {
  if (text.empty()) return {TextSplit{0, 0, -1}};
  std::vector<TextSplit> splits;
  size_t covered = 0;  // end of the last piece emitted
  size_t pos = 0;
  while (pos < text.size()) {
    if (!impl_->first_byte[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [len, index] = impl_->longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = impl_->tokens[index];
    size_t begin = pos, end = pos + len;
    pos = end;  // the automaton resumes after the raw match, even if the match is dropped
    if (token.single_word) {
      const bool space_before = begin == 0 || !ends_with_word(text, begin);
      const bool space_after = end == text.size() || !starts_with_word(text, end);
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) begin = std::max(whitespace_run_start(text, begin), covered);
    if (token.rstrip) end = whitespace_run_end(text, end);
    if (covered < begin) splits.push_back({covered, begin, -1});
    splits.push_back({begin, end, token.id});
    covered = end;
  }
  if (covered != text.size()) splits.push_back({covered, text.size(), -1});
  return splits;
}

}  // namespace detllm
