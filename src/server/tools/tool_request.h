// Validation of the tool fields of a chat request: `tools`, `tool_choice`, and an assistant
// message's `tool_calls` (history). Every problem is a 400 naming the field
// ("tools[1].function.name"), as the rest of the OpenAI schema (openai_schema.h).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "server/tools/tool_spec.h"

namespace detllm::server {

inline constexpr size_t kMaxTools = 128;

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?,
// "strict"?}}]. Names: 1–64 of [A-Za-z0-9_.-], unique.
std::vector<ToolSpec> parse_tools(const nlohmann::json& v);

// tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}};
// the named function must be one of `tools`, and "required" / a name need tools.
ToolChoice parse_tool_choice(const nlohmann::json& v, const std::vector<ToolSpec>& tools);

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name",
// "arguments"}}], arguments a JSON text. `path` prefixes field names ("messages[2].").
std::vector<ToolCall> parse_message_tool_calls(const nlohmann::json& v, const std::string& path);

// Puts back the key order the client wrote in each tool's function object (the request is
// validated from a std::map JSON, which sorts keys): `ordered_tools` is the request's "tools"
// parsed as ordered JSON, same length as `tools`.
void keep_tool_key_order(const nlohmann::ordered_json& ordered_tools,
                         std::vector<ToolSpec>& tools);

}  // namespace detllm::server
