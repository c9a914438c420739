// Pre-tokenizer steps (see pre_tokenizer.h). Each step maps a list of pieces to a new list,
// cutting with the same match/behavior rules as HF's NormalizedString::split, and dropping
// empty pieces as HF's PreTokenizedString::split does.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "core/strings.h"
#include "core/unicode.h"
#include "tokenizer/byte_level.h"

namespace detllm {
namespace {

struct Piece {
  std::string text;
  bool at_text_start = false;
};

// A cover of a piece by consecutive ranges, each a pattern match or not.
struct Span {
  size_t begin, end;
  bool is_match;
};

std::vector<Span> cover_from_matches(std::string_view text,
                                     const std::vector<std::pair<size_t, size_t>>& matches) {
  if (text.empty()) return {{0, 0, false}};
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), false});
  return spans;
}

// Ranges kept after applying `behavior` to the cover (HF NormalizedString::split).
std::vector<std::pair<size_t, size_t>> apply_behavior(const std::vector<Span>& spans,
                                                      SplitBehavior behavior) {
  std::vector<std::pair<size_t, size_t>> out;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) out.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) out.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().first = s.begin;
        } else {
          out.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

void cut(const Piece& piece, const std::vector<Span>& spans, SplitBehavior behavior,
         std::vector<Piece>& out) {
  for (const auto& [b, e] : apply_behavior(spans, behavior)) {
    if (b == e) continue;
    out.push_back({piece.text.substr(b, e - b), piece.at_text_start && b == 0});
  }
}

std::vector<Span> regex_cover(std::string_view text, const Regex& regex, bool invert) {
  std::vector<Span> spans = cover_from_matches(text, regex.find_all(text));
  if (invert) {
    for (Span& s : spans) s.is_match = !s.is_match;
  }
  return spans;
}

// Every code point satisfying `pred` is its own match (HF's char-predicate Pattern).
template <typename Pred>
std::vector<Span> char_cover(std::string_view text, Pred pred) {
  std::vector<std::pair<size_t, size_t>> matches;
  size_t i = 0;
  while (i < text.size()) {
    const size_t begin = i;
    if (pred(unicode::next_code_point(text, i))) matches.emplace_back(begin, i);
  }
  return cover_from_matches(text, matches);
}

std::vector<Span> literal_cover(std::string_view text, std::string_view literal) {
  std::vector<std::pair<size_t, size_t>> matches;
  size_t pos = 0;
  while (!literal.empty()) {
    const size_t hit = text.find(literal, pos);
    if (hit == std::string_view::npos) break;
    matches.emplace_back(hit, hit + literal.size());
    pos = hit + literal.size();
  }
  return cover_from_matches(text, matches);
}

void apply_step(const PreTokenizerStep& step, std::vector<Piece>& pieces) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (Piece& piece : pieces) {
    switch (step.kind) {
      case PreTokenizerStep::Kind::kSplit:
        cut(piece, regex_cover(piece.text, *step.regex, step.invert), step.behavior, out);
        break;
      case PreTokenizerStep::Kind::kDigits:
        cut(piece, char_cover(piece.text, unicode::is_numeric),
            step.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, out);
        break;
      case PreTokenizerStep::Kind::kByteLevel: {
        if (step.add_prefix_space && piece.text.rfind(' ', 0) != 0)
          piece.text.insert(piece.text.begin(), ' ');
        const size_t first = out.size();
        if (step.use_regex) {
          cut(piece, regex_cover(piece.text, gpt2_split_regex(), false), SplitBehavior::kIsolated,
              out);
        } else if (!piece.text.empty()) {
          out.push_back(std::move(piece));
        }
        for (size_t k = first; k < out.size(); ++k) out[k].text = byte_level::encode(out[k].text);
        break;
      }
      case PreTokenizerStep::Kind::kMetaspace: {
        piece.text = replace_all(piece.text, " ", step.replacement);
        const bool starts = piece.text.rfind(step.replacement, 0) == 0;
        const bool prepend =
            !starts && (step.prepend_scheme == PreTokenizerStep::PrependScheme::kAlways ||
                        (step.prepend_scheme == PreTokenizerStep::PrependScheme::kFirst &&
                         piece.at_text_start));
        if (prepend) piece.text.insert(0, step.replacement);
        if (step.split) {
          cut(piece, literal_cover(piece.text, step.replacement), SplitBehavior::kMergedWithNext,
              out);
        } else if (!piece.text.empty()) {
          out.push_back(std::move(piece));
        }
        break;
      }
    }
  }
  pieces = std::move(out);
}

}  // namespace

const Regex& gpt2_split_regex() {
  static const Regex regex(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
  return regex;
}

void PreTokenizer::pre_tokenize(std::string piece, bool at_text_start,
                                std::vector<std::string>& words) const {
  if (piece.empty()) return;
  std::vector<Piece> pieces;
  pieces.push_back({std::move(piece), at_text_start});
  for (const PreTokenizerStep& step : steps_) apply_step(step, pieces);
  for (Piece& p : pieces) {
    if (!p.text.empty()) words.push_back(std::move(p.text));
  }
}

}  // namespace detllm
