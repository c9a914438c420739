// Choosing a tool-call parser, finding where a call section starts, and the shared call-object
// check (see tool_parser.h).
#include "server/tools/tool_parser.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "server/tools/text_scan.h"

namespace detllm::server {
namespace {

constexpr std::string_view kHermesStart = "<tool_call>";
constexpr std::string_view kMistralStart = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

SectionStart marker_start(std::string_view text, std::string_view marker, size_t from) {
  from = from > marker.size() ? from - marker.size() : 0;
  if (const size_t pos = text.find(marker, std::min(from, text.size())); pos != text.npos) {
    return {pos, true};
  }
  return {text.size() - partial_marker_len(text, marker), false};
}

SectionStart llama3_start(std::string_view text) {
  const size_t p = skip_json_space(text, 0);
  const std::string_view rest = text.substr(p);
  if (rest.starts_with("{") || rest.starts_with(kPythonTag)) return {0, true};
  if (rest.empty() || kPythonTag.starts_with(rest)) return {0, false};
  return {std::string_view::npos, false};
}

}  // namespace

std::optional<ToolParserKind> tool_parser_from_name(std::string_view name) {
  if (name == "none") return ToolParserKind::kNone;
  if (name == "llama3_json") return ToolParserKind::kLlama3Json;
  if (name == "hermes") return ToolParserKind::kHermes;
  if (name == "mistral") return ToolParserKind::kMistral;
  return std::nullopt;
}

std::string_view tool_parser_name(ToolParserKind kind) {
  switch (kind) {
    case ToolParserKind::kNone: return "none";
    case ToolParserKind::kLlama3Json: return "llama3_json";
    case ToolParserKind::kHermes: return "hermes";
    case ToolParserKind::kMistral: return "mistral";
  }
  return "none";
}

ToolParserKind detect_tool_parser(std::string_view source) {
  if (source.find(kHermesStart) != source.npos) return ToolParserKind::kHermes;
  if (source.find(kMistralStart) != source.npos) return ToolParserKind::kMistral;
  if (source.find(kPythonTag) != source.npos || source.find("Environment: ipython") != source.npos) {
    return ToolParserKind::kLlama3Json;
  }
  return ToolParserKind::kNone;
}

std::vector<std::string_view> tool_parser_markers(ToolParserKind kind) {
  switch (kind) {
    case ToolParserKind::kHermes: return {kHermesStart, "</tool_call>"};
    case ToolParserKind::kMistral: return {kMistralStart};
    case ToolParserKind::kLlama3Json:  // <|python_tag|> may be skipped: the JSON follows it
    case ToolParserKind::kNone: return {};
  }
  return {};
}

SectionStart find_section_start(ToolParserKind kind, std::string_view text, size_t from) {
  switch (kind) {
    case ToolParserKind::kNone: return {std::string_view::npos, false};
    case ToolParserKind::kLlama3Json: return llama3_start(text);
    case ToolParserKind::kHermes: return marker_start(text, kHermesStart, from);
    case ToolParserKind::kMistral: return marker_start(text, kMistralStart, from);
  }
  return {std::string_view::npos, false};
}

std::optional<std::vector<ParsedCall>> parse_section(ToolParserKind kind,
                                                     std::string_view section) {
  switch (kind) {
    case ToolParserKind::kNone: return std::nullopt;
    case ToolParserKind::kLlama3Json: return parse_llama3_json_section(section);
    case ToolParserKind::kHermes: return parse_hermes_section(section);
    case ToolParserKind::kMistral: return parse_mistral_section(section);
  }
  return std::nullopt;
}

ToolParse parse_tool_calls(ToolParserKind kind, std::string_view text) {
  ToolParse out;
  const SectionStart s = find_section_start(kind, text);
  if (s.certain) {
    if (auto calls = parse_section(kind, text.substr(s.pos))) {
      out.content = std::string(text.substr(0, s.pos));
      out.calls = std::move(*calls);
      return out;
    }
  }
  out.content = std::string(text);
  return out;
}

std::optional<ParsedCall> call_from_json_text(std::string_view object_text,
                                              std::initializer_list<std::string_view> args_keys) {
  using ojson = nlohmann::ordered_json;
  ojson j = ojson::parse(object_text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  for (std::string_view key : args_keys) {
    const auto args = j.find(std::string(key));
    if (args == j.end()) continue;
    if (!args->is_object()) return std::nullopt;
    return ParsedCall{name->get<std::string>(),
                      args->dump(-1, ' ', false, ojson::error_handler_t::replace)};
  }
  return std::nullopt;
}

std::optional<std::vector<ParsedCall>> calls_from_json_list(const nlohmann::ordered_json& list) {
  if (!list.is_array() || list.empty()) return std::nullopt;
  std::vector<ParsedCall> calls;
  for (const nlohmann::ordered_json& item : list) {
    auto call = call_from_json_text(item.dump(), {"arguments"});
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  }
  return calls;
}

}  // namespace detllm::server
