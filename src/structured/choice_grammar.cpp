#include "structured/choice_grammar.h"

#include <fmt/format.h>

namespace detllm::structured {

std::string choice_grammar(const std::vector<std::string>& choices) {
  std::string g = "root ::= ";
  for (size_t k = 0; k < choices.size(); ++k) {
    if (k) g += " | ";
    g += '"';
    for (const char ch : choices[k]) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == '"' || c == '\\') {
        g += '\\';
        g += ch;
      } else if (c == '\n') {
        g += "\\n";
      } else if (c == '\r') {
        g += "\\r";
      } else if (c == '\t') {
        g += "\\t";
      } else if (c < 0x20 || c == 0x7F) {
        g += fmt::format("\\x{:02x}", c);
      } else {
        g += ch;
      }
    }
    g += '"';
  }
  return g + "\n";
}

}  // namespace detllm::structured
