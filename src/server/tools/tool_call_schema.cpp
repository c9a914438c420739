// JSON schemas for constrained tool calls (see tool_call_schema.h).
#include "server/tools/tool_call_schema.h"

#include "server/tools/text_scan.h"

namespace detllm::server {
namespace {

using ojson = nlohmann::ordered_json;

ojson call_schema(const ToolSpec& tool) {
  return {{"type", "object"},
          {"properties",
           {{"name", {{"type", "string"}, {"enum", ojson::array({tool.name})}}},
            {"arguments", tool.parameters.empty() ? ojson({{"type", "object"}}) : tool.parameters}}},
          {"required", ojson::array({"name", "arguments"})},
          {"additionalProperties", false}};
}

}  // namespace

std::optional<ojson> tool_call_schema(const std::vector<ToolSpec>& tools, const ToolChoice& choice,
                                      bool parallel_tool_calls) {
  ojson items;
  if (choice.kind == ToolChoice::Kind::kRequired) {
    ojson any = ojson::array();
    for (const ToolSpec& t : tools) any.push_back(call_schema(t));
    if (any.empty()) return std::nullopt;
    items = any.size() == 1 ? any[0] : ojson({{"anyOf", std::move(any)}});
  } else if (choice.kind == ToolChoice::Kind::kNamed) {
    for (const ToolSpec& t : tools) {
      if (t.name == choice.name) items = call_schema(t);
    }
    if (items.is_null()) return std::nullopt;
  } else {
    return std::nullopt;
  }
  ojson schema = {{"type", "array"}, {"items", std::move(items)}, {"minItems", 1}};
  if (!parallel_tool_calls) schema["maxItems"] = 1;
  return schema;
}

std::string_view tool_call_trigger(ToolParserKind kind) {
  switch (kind) {
    case ToolParserKind::kHermes: return "<tool_call>";
    case ToolParserKind::kMistral: return "[TOOL_CALLS]";
    case ToolParserKind::kLlama3Json:
    case ToolParserKind::kNone: return "";
  }
  return "";
}

std::optional<std::vector<ParsedCall>> parse_constrained_tool_calls(std::string_view text) {
  const size_t start = skip_json_space(text, 0);
  const size_t end = json_value_end(text, start);
  if (end == std::string_view::npos || skip_json_space(text, end) != text.size() ||
      text[start] != '[') {
    return std::nullopt;
  }
  return calls_from_json_list(ojson::parse(text.substr(start, end - start), nullptr, false));
}

}  // namespace detllm::server
