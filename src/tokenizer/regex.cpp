// PCRE2 wrapper for the tokenizer's split patterns (see regex.h). Patterns are compiled once
// with UTF | UCP and JIT-compiled; each find_all call owns its match data, so one Regex can be
// shared by threads that tokenize concurrently.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"
#include "core/unicode.h"

namespace detllm {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return "unknown PCRE2 error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Owns the per-call scratch: match data, and a large JIT stack made only if the default
// 32 KiB machine stack runs out (very long runs of one character class can need it).
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~MatchScratch() {
    if (data) pcre2_match_data_free(data);
    if (context) pcre2_match_context_free(context);
    if (stack) pcre2_jit_stack_free(stack);
  }
};

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

std::string translate_oniguruma_pattern(std::string_view pattern) {
  // The members of each class, usable inside [...] as they are.
  constexpr std::string_view kSpace =
      R"(\t\n\x0B\f\r\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
  constexpr std::string_view kWord = R"(\p{L}\p{M}\p{Nd}\p{Pc})";
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      const bool space = e == 's' || e == 'S', word = e == 'w' || e == 'W';
      if ((space || word) && !(in_class && (e == 'S' || e == 'W'))) {
        const std::string_view members = space ? kSpace : kWord;
        const bool negated = e == 'S' || e == 'W';
        if (in_class) {
          out += members;
        } else {
          out += negated ? "[^" : "[";
          out += members;
          out += ']';
        }
      } else {
        out += c;
        out += e;
      }
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < pattern.size() && pattern[i] == '^') out += pattern[i++];
      if (i < pattern.size() && pattern[i] == ']') out += pattern[i++];  // literal ']'
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t close = pattern.find(":]", i + 2);  // POSIX class like [:alpha:]
      if (close != std::string_view::npos) {
        out += pattern.substr(i, close + 2 - i);
        i = close + 2;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  return out;
}

Regex::Regex(std::string_view onig_pattern)
    : pattern_(onig_pattern), impl_(std::make_unique<Impl>()) {
  const std::string pattern = translate_oniguruma_pattern(onig_pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (impl_->code == nullptr) {
    throw_error(
        "cannot compile the split regex '{}': {} at offset {}; the pattern must be "
        "valid PCRE2 syntax",
        onig_pattern, pcre2_message(error_code), static_cast<size_t>(error_offset));
  }
  // JIT is an optimization: if it is unavailable the interpreter gives the same matches.
  (void)pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  MatchScratch scratch;
  scratch.data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  check(scratch.data != nullptr, "out of memory creating regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  uint32_t options = 0;
  while (offset <= text.size()) {
    int rc = pcre2_match(impl_->code, subject, text.size(), offset, options | PCRE2_NO_UTF_CHECK,
                         scratch.data, scratch.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && scratch.stack == nullptr) {
      scratch.stack = pcre2_jit_stack_create(64 * 1024, 256 * 1024 * 1024, nullptr);
      scratch.context = pcre2_match_context_create(nullptr);
      check(scratch.stack != nullptr && scratch.context != nullptr,
            "out of memory creating a regex JIT stack");
      pcre2_jit_stack_assign(scratch.context, nullptr, scratch.stack);
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (options == 0) break;
      // No non-empty match at the position of an empty one: step one code point on.
      if (offset >= text.size()) break;
      offset += unicode::utf8_sequence_length(static_cast<unsigned char>(text[offset]));
      options = 0;
      continue;
    }
    if (rc < 0) {
      throw_error("regex '{}' failed on a text of {} bytes: {}", pattern_, text.size(),
                  pcre2_message(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.data);
    const size_t begin = ov[0], end = ov[1];
    matches.emplace_back(begin, end);
    offset = end;
    // After an empty match, look for a non-empty one at the same place before moving on.
    options = (begin == end) ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
  }
  return matches;
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace detllm
