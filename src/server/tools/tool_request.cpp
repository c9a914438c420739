// Tool fields of a chat request, validated into native structs (see tool_request.h).
#include "server/tools/tool_request.h"

#include "server/api_error.h"
#include "server/json_fields.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;

bool valid_tool_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string required_name(FieldReader& r) {
  const auto name = r.get_string("name", 256);
  if (!name) throw_bad_request(r.name("name"), "'{}' is required", r.name("name"));
  if (!valid_tool_name(*name)) {
    throw_bad_request(r.name("name"),
                      "'{}' must be 1 to 64 letters, digits, '_', '-' or '.', got \"{}\"",
                      r.name("name"), name->substr(0, 80));
  }
  return *name;
}

void require_function_type(FieldReader& r, bool required) {
  const auto type = r.get_string("type", 64);
  if (!type && !required) return;
  if (!type || *type != "function") {
    throw_bad_request(r.name("type"), "'{}' must be \"function\"", r.name("type"));
  }
}

}  // namespace

std::vector<ToolSpec> parse_tools(const json& v) {
  if (!v.is_array()) {
    throw_bad_request("tools", "'tools' must be a list of function tools, got {}",
                      json_type_name(v));
  }
  if (v.size() > kMaxTools) {
    throw_bad_request("tools", "'tools' has {} entries; at most {} are accepted", v.size(),
                      kMaxTools);
  }
  std::vector<ToolSpec> tools;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string path = fmt::format("tools[{}].", i);
    FieldReader t(v[i], path);
    require_function_type(t, /*required=*/true);
    const json* fn = t.get_raw("function");
    if (fn == nullptr) throw_bad_request(t.name("function"), "'{}' is required", t.name("function"));
    t.reject_unknown();
    FieldReader f(*fn, path + "function.");
    ToolSpec spec;
    spec.name = required_name(f);
    (void)f.get_string("description", 1 << 20);
    if (const json* p = f.get_raw("parameters")) {
      if (!p->is_object()) {
        throw_bad_request(f.name("parameters"), "'{}' must be a JSON schema (an object), got {}",
                          f.name("parameters"), json_type_name(*p));
      }
      spec.parameters = *p;
    } else {
      spec.parameters = nlohmann::ordered_json::object();
    }
    spec.strict = f.get_bool("strict").value_or(false);
    f.reject_unknown();
    for (const ToolSpec& other : tools) {
      if (other.name == spec.name) {
        throw_bad_request(f.name("name"), "'{}': two tools are named \"{}\"", f.name("name"),
                          spec.name);
      }
    }
    spec.function = *fn;
    tools.push_back(std::move(spec));
  }
  return tools;
}

ToolChoice parse_tool_choice(const json& v, const std::vector<ToolSpec>& tools) {
  ToolChoice c;
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "none") {
      c.kind = ToolChoice::Kind::kNone;
    } else if (s == "auto") {
      c.kind = ToolChoice::Kind::kAuto;
    } else if (s == "required") {
      c.kind = ToolChoice::Kind::kRequired;
    } else {
      throw_bad_request("tool_choice",
                        "'tool_choice' is \"{}\"; expected \"none\", \"auto\", \"required\" or "
                        "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}",
                        s.substr(0, 64));
    }
  } else if (v.is_object()) {
    FieldReader r(v, "tool_choice.");
    require_function_type(r, /*required=*/true);
    const json* fn = r.get_raw("function");
    if (fn == nullptr) throw_bad_request(r.name("function"), "'{}' is required", r.name("function"));
    r.reject_unknown();
    FieldReader f(*fn, "tool_choice.function.");
    c.kind = ToolChoice::Kind::kNamed;
    c.name = required_name(f);
    f.reject_unknown();
  } else {
    throw_bad_request("tool_choice", "'tool_choice' must be a string or an object, got {}",
                      json_type_name(v));
  }
  if (tools.empty() && c.kind != ToolChoice::Kind::kNone && c.kind != ToolChoice::Kind::kAuto) {
    throw_bad_request("tool_choice", "'tool_choice' asks for a tool call but 'tools' is empty");
  }
  if (c.kind == ToolChoice::Kind::kNamed) {
    bool found = false;
    for (const ToolSpec& t : tools) found = found || t.name == c.name;
    if (!found) {
      throw_bad_request("tool_choice.function.name",
                        "'tool_choice.function.name' is \"{}\", which is not one of 'tools'",
                        c.name);
    }
  }
  return c;
}

std::vector<ToolCall> parse_message_tool_calls(const json& v, const std::string& path) {
  const std::string field = path + "tool_calls";
  if (!v.is_array()) {
    throw_bad_request(field, "'{}' must be a list of tool calls, got {}", field,
                      json_type_name(v));
  }
  if (v.size() > kMaxTools) {
    throw_bad_request(field, "'{}' has {} calls; at most {} are accepted", field, v.size(),
                      kMaxTools);
  }
  std::vector<ToolCall> calls;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string call_path = fmt::format("{}[{}].", field, i);
    FieldReader c(v[i], call_path);
    ToolCall call;
    const auto id = c.get_string("id", 256);
    if (!id) throw_bad_request(c.name("id"), "'{}' is required", c.name("id"));
    call.id = *id;
    require_function_type(c, /*required=*/false);
    const json* fn = c.get_raw("function");
    if (fn == nullptr) throw_bad_request(c.name("function"), "'{}' is required", c.name("function"));
    c.reject_unknown();
    FieldReader f(*fn, call_path + "function.");
    call.name = required_name(f);
    const auto args = f.get_string("arguments", 1 << 20);
    if (!args) throw_bad_request(f.name("arguments"), "'{}' is required", f.name("arguments"));
    if (!json::accept(*args)) {
      throw_bad_request(f.name("arguments"), "'{}' must be a JSON text (the call's arguments)",
                        f.name("arguments"));
    }
    call.arguments = *args;
    f.reject_unknown();
    calls.push_back(std::move(call));
  }
  return calls;
}

void keep_tool_key_order(const nlohmann::ordered_json& ordered_tools,
                         std::vector<ToolSpec>& tools) {
  if (!ordered_tools.is_array() || ordered_tools.size() != tools.size()) return;
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& fn = ordered_tools[i].at("function");
    tools[i].function = fn;
    if (fn.contains("parameters")) tools[i].parameters = fn.at("parameters");
  }
}

}  // namespace detllm::server
