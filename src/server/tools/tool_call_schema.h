// The seam for enforcing tool_choice "required" and a named function with a grammar: the JSON
// schema the output must match, built from the request's tools and tool_choice. Until the
// grammar engine (src/structured) constrains chat outputs, the server only parses what the
// model writes (tool_parser.h); a grammar built from this schema makes the call certain.
//
// Constrained output format (as vLLM's for these choices): the whole output is a JSON array of
// calls [{"name": ..., "arguments": {...}}, ...]; parse_constrained_tool_calls reads it back.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/tools/tool_parser.h"
#include "server/tools/tool_spec.h"

namespace detllm::server {

// The schema of the output for tool_choice "required" (an array of one or more calls, each
// naming one of `tools` with that tool's parameters as its arguments) or a named function
// (calls of that function only); at most one call when !parallel_tool_calls. nullopt for
// "none" and "auto", which do not constrain the output.
std::optional<nlohmann::ordered_json> tool_call_schema(const std::vector<ToolSpec>& tools,
                                                       const ToolChoice& choice,
                                                       bool parallel_tool_calls);

// The text that opens a call in the model's own format ("<tool_call>", "[TOOL_CALLS]"; "" for
// llama3_json, whose call is the whole output): where a structural-tag grammar would switch
// from free text to a call schema under tool_choice "auto".
std::string_view tool_call_trigger(ToolParserKind kind);

// The calls of an output constrained by tool_call_schema; nullopt when it is not such an array.
std::optional<std::vector<ParsedCall>> parse_constrained_tool_calls(std::string_view text);

}  // namespace detllm::server
