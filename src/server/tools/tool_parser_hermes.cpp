// The hermes format (Qwen2.5, Qwen3, Hermes 2/3): one <tool_call>{"name": ..., "arguments":
// {...}}</tool_call> block per call, separated by whitespace. The last block may lack its
// closing tag (the model stopped at end-of-text right after the JSON). Anything else after
// the first block makes the whole section content.
#include "server/tools/text_scan.h"
#include "server/tools/tool_parser.h"

namespace detllm::server {

std::optional<std::vector<ParsedCall>> parse_hermes_section(std::string_view section) {
  constexpr std::string_view kOpen = "<tool_call>";
  constexpr std::string_view kClose = "</tool_call>";
  std::vector<ParsedCall> calls;
  size_t pos = 0;
  while (pos < section.size()) {
    if (!section.substr(pos).starts_with(kOpen)) return std::nullopt;
    pos = skip_json_space(section, pos + kOpen.size());
    const size_t end = json_value_end(section, pos);
    if (end == std::string_view::npos) return std::nullopt;
    auto call = call_from_json_text(section.substr(pos, end - pos), {"arguments"});
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    pos = skip_json_space(section, end);
    if (section.substr(pos).starts_with(kClose)) {
      pos = skip_json_space(section, pos + kClose.size());
    } else if (pos < section.size()) {
      return std::nullopt;
    }
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

}  // namespace detllm::server
