// The native shapes of OpenAI tool calling: the tools a request offers (ToolSpec), how the
// model may use them (ToolChoice), and one call (ToolCall: made by the model in an earlier
// assistant message, or parsed from this one's output). Validation is in tool_request.h.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace detllm::server {

// One {"type": "function", "function": {...}} tool.
struct ToolSpec {
  std::string name;
  // The function object as the request gave it (key order kept: the chat template prints it
  // with tojson, as transformers does with the client's dict).
  nlohmann::ordered_json function;
  nlohmann::ordered_json parameters;  // a JSON schema object; {} when not given
  bool strict = false;
};

struct ToolChoice {
  enum class Kind : uint8_t {
    kNone,      // never call a tool: the output is text
    kAuto,      // the model decides (the default when tools are given)
    kRequired,  // at least one call
    kNamed,     // a call of `name`
  };
  Kind kind = Kind::kAuto;
  std::string name;  // kNamed only
};

// One function call: {"id", "type": "function", "function": {"name", "arguments"}}.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON text (an object, as the model wrote it or re-serialized)
};

}  // namespace detllm::server
