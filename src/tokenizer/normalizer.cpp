// Normalizer steps (see normalizer.h), each written to do what the Hugging Face step of the
// same name does to the normalized string; offsets are not tracked (only ids are produced).
#include "tokenizer/normalizer.h"

#include "core/strings.h"

namespace detllm {
namespace {

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Whether replacing the match [begin, end) keeps the text's first character at offset 0: HF
// aligns inserted characters with the last replaced one, and a deletion drops the start.
bool replacement_keeps_start(std::string_view text, size_t begin, size_t end, std::string_view to) {
  if (begin != 0) return true;
  return !to.empty() && code_points(text.substr(begin, end - begin)) <= 1;
}

std::string replace_regex(std::string_view text, const Regex& regex, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (const auto& [begin, end] : regex.find_all(text)) {
    out.append(text.substr(pos, begin - pos));
    out.append(to);
    pos = end;
  }
  out.append(text.substr(pos));
  return out;
}

std::string strip_whitespace(std::string_view text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end) {
      size_t i = begin;
      if (!unicode::is_whitespace(unicode::next_code_point(text, i))) break;
      begin = i;
    }
  }
  if (right) {
    while (end > begin) {
      size_t j = end;
      do {
        --j;
      } while (j > begin && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80);
      size_t k = j;
      if (!unicode::is_whitespace(unicode::next_code_point(text, k))) break;
      end = j;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

}  // namespace

std::string Normalizer::normalize(std::string_view text, bool* keeps_start) const {
  std::string s(text);
  bool start = true;
  for (const NormalizerStep& step : steps_) {
    if (keeps_start && start && !s.empty()) {
      if (step.kind == NormalizerStep::Kind::kReplace) {
        if (step.regex) {
          const auto matches = step.regex->find_all(s);
          if (!matches.empty()) {
            start = replacement_keeps_start(s, matches[0].first, matches[0].second, step.text);
          }
        } else if (!step.literal.empty() && s.rfind(step.literal, 0) == 0) {
          start = replacement_keeps_start(s, 0, step.literal.size(), step.text);
        }
      } else if (step.kind == NormalizerStep::Kind::kStrip && step.strip_left) {
        size_t i = 0;
        start = !unicode::is_whitespace(unicode::next_code_point(s, i));
      }
    }
    switch (step.kind) {
      case NormalizerStep::Kind::kUnicode:
        s = unicode::normalize(s, step.form);
        break;
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.text);
        break;
      case NormalizerStep::Kind::kReplace:
        s = step.regex ? replace_regex(s, *step.regex, step.text)
                       : replace_all(s, step.literal, step.text);
        break;
      case NormalizerStep::Kind::kLowercase:
        s = unicode::lowercase(s);
        break;
      case NormalizerStep::Kind::kStrip:
        s = strip_whitespace(s, step.strip_left, step.strip_right);
        break;
    }
  }
  if (keeps_start) *keeps_start = start;
  return s;
}

}  // namespace detllm
