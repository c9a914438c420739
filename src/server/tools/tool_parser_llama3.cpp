// The llama3_json format (Llama 3.1 / 3.2 with JSON tool calling): the whole output is
// {"name": ..., "parameters": {...}} ("arguments" is taken too), optionally after
// <|python_tag|> (when the tokenizer does not skip it as a special token), several calls
// separated by ';'. Output that starts otherwise has no calls.
#include "server/tools/text_scan.h"
#include "server/tools/tool_parser.h"

namespace detllm::server {

std::optional<std::vector<ParsedCall>> parse_llama3_json_section(std::string_view section) {
  constexpr std::string_view kPythonTag = "<|python_tag|>";
  size_t pos = skip_json_space(section, 0);
  if (section.substr(pos).starts_with(kPythonTag)) {
    pos = skip_json_space(section, pos + kPythonTag.size());
  }
  std::vector<ParsedCall> calls;
  for (;;) {
    if (pos >= section.size() || section[pos] != '{') return std::nullopt;
    const size_t end = json_value_end(section, pos);
    if (end == std::string_view::npos) return std::nullopt;
    auto call = call_from_json_text(section.substr(pos, end - pos), {"parameters", "arguments"});
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    pos = skip_json_space(section, end);
    if (pos == section.size()) break;
    if (section[pos] != ';') return std::nullopt;
    pos = skip_json_space(section, pos + 1);
  }
  return calls;
}

}  // namespace detllm::server
