// Bracket matching over JSON text and partial markers (see text_scan.h).
#include "server/tools/text_scan.h"

#include <algorithm>
#include <string>

namespace detllm::server {

size_t json_value_end(std::string_view text, size_t start) {
  if (start >= text.size() || (text[start] != '{' && text[start] != '[')) {
    return std::string_view::npos;
  }
  std::string stack;  // the closers still owed
  bool in_string = false;
  for (size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character (a \uXXXX's digits are plain characters)
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      stack.push_back('}');
    } else if (c == '[') {
      stack.push_back(']');
    } else if (c == '}' || c == ']') {
      if (stack.empty() || stack.back() != c) return std::string_view::npos;
      stack.pop_back();
      if (stack.empty()) return i + 1;
    }
  }
  return std::string_view::npos;
}

size_t skip_json_space(std::string_view text, size_t pos) {
  while (pos < text.size() &&
         (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' || text[pos] == '\r')) {
    ++pos;
  }
  return pos;
}

size_t partial_marker_len(std::string_view text, std::string_view marker) {
  if (marker.empty()) return 0;
  const size_t max = std::min(text.size(), marker.size() - 1);
  for (size_t k = max; k > 0; --k) {
    if (marker.starts_with(text.substr(text.size() - k))) return k;
  }
  return 0;
}

}  // namespace detllm::server
