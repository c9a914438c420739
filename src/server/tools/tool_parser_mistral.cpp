// The mistral format: [TOOL_CALLS] then a JSON list of {"name", "arguments", "id"?} (a single
// object is taken too), and nothing but whitespace after it. The model's ids are not kept:
// the response gives each call its own (tool_output.h). The newer [TOOL_CALLS]name[ARGS]{...}
// form of Mistral's v11 tokenizers is not parsed (its text stays content).
#include <nlohmann/json.hpp>

#include "server/tools/text_scan.h"
#include "server/tools/tool_parser.h"

namespace detllm::server {

std::optional<std::vector<ParsedCall>> parse_mistral_section(std::string_view section) {
  constexpr std::string_view kStart = "[TOOL_CALLS]";
  if (!section.starts_with(kStart)) return std::nullopt;
  const size_t pos = skip_json_space(section, kStart.size());
  const size_t end = json_value_end(section, pos);
  if (end == std::string_view::npos || skip_json_space(section, end) != section.size()) {
    return std::nullopt;
  }
  using ojson = nlohmann::ordered_json;
  const ojson j = ojson::parse(section.substr(pos, end - pos), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return calls_from_json_list(j.is_array() ? j : ojson::array({j}));
}

}  // namespace detllm::server
