// Structured-output request fields (see structured_fields.h).
#include "server/structured_fields.h"

#include <algorithm>
#include <vector>

#include "server/api_error.h"

namespace detllm::server {
namespace {

using json = nlohmann::json;
using structured::GrammarSpec;

// A JSON schema given as an object (or, as vLLM also takes it, as a string holding one).
std::string schema_text(const json& v, const std::string& param, const RequestLimits& limits) {
  std::string text;
  if (v.is_object() || v.is_boolean()) {
    text = v.dump();
  } else if (v.is_string()) {
    text = v.get<std::string>();
  } else {
    throw_bad_request(param, "'{}' must be a JSON schema (an object), not {}", param,
                      json_type_name(v));
  }
  if (text.size() > limits.max_string_bytes) {
    throw_bad_request(param, "'{}' is {} bytes; at most {} are allowed", param, text.size(),
                      limits.max_string_bytes);
  }
  return text;
}

std::vector<std::string> choices_of(const json& v, const std::string& param) {
  if (!v.is_array() || v.empty()) {
    throw_bad_request(param, "'{}' must be a non-empty list of strings", param);
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      throw_bad_request(param, "'{}[{}]' must be a string, not {}", param, i,
                        json_type_name(v[i]));
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

std::optional<StructuredOutput> response_format(FieldReader& top, const RequestLimits& limits) {
  const json* rf = top.get_raw("response_format");
  if (rf == nullptr) return std::nullopt;
  FieldReader r(*rf, "response_format.");
  const auto type = r.get_string("type", 64);
  if (!type) throw_bad_request("response_format.type", "'response_format.type' is required");
  if (*type == "text") {
    r.reject_unknown();
    return std::nullopt;
  }
  if (*type == "json_object") {
    r.reject_unknown();
    return StructuredOutput{GrammarSpec::json_object(), "response_format"};
  }
  if (*type == "json_schema") {
    const json* js = r.get_raw("json_schema");
    if (js == nullptr) {
      throw_bad_request("response_format.json_schema",
                        "'response_format.json_schema' is required for type 'json_schema'");
    }
    r.reject_unknown();
    FieldReader s(*js, "response_format.json_schema.");
    const auto name = s.get_string("name", 64);
    if (!name || name->empty()) {
      throw_bad_request("response_format.json_schema.name",
                        "'response_format.json_schema.name' is required");
    }
    s.get_string("description", limits.max_string_bytes);
    const bool strict = s.get_bool("strict").value_or(false);
    const json* schema = s.get_raw("schema");
    s.reject_unknown();
    // No schema: any JSON (OpenAI allows the field to be left out).
    if (schema == nullptr) return StructuredOutput{GrammarSpec::json_object(), "response_format"};
    const std::string param = "response_format.json_schema.schema";
    return StructuredOutput{GrammarSpec::json_schema(schema_text(*schema, param, limits), strict),
                            param};
  }
  throw_bad_request("response_format.type",
                    "'response_format.type' must be 'text', 'json_object' or 'json_schema', got "
                    "'{}'",
                    *type);
}

// vLLM's StructuredOutputsParams: exactly one of json, regex, choice, grammar, json_object.
std::optional<StructuredOutput> structured_outputs(FieldReader& top, const RequestLimits& limits) {
  const json* so = top.get_raw("structured_outputs");
  if (so == nullptr) return std::nullopt;
  FieldReader r(*so, "structured_outputs.");
  std::vector<StructuredOutput> found;
  if (const json* j = r.get_raw("json")) {
    found.push_back({GrammarSpec::json_schema(schema_text(*j, "structured_outputs.json", limits),
                                              false),
                     "structured_outputs.json"});
  }
  if (auto re = r.get_string("regex", limits.max_string_bytes)) {
    found.push_back({GrammarSpec::regex(*re), "structured_outputs.regex"});
  }
  if (const json* c = r.get_raw("choice")) {
    found.push_back({GrammarSpec::choice(choices_of(*c, "structured_outputs.choice")),
                     "structured_outputs.choice"});
  }
  if (auto g = r.get_string("grammar", limits.max_string_bytes)) {
    found.push_back({GrammarSpec::ebnf(*g), "structured_outputs.grammar"});
  }
  if (r.get_bool("json_object").value_or(false)) {
    found.push_back({GrammarSpec::json_object(), "structured_outputs.json_object"});
  }
  if (const json* w = r.get_raw("whitespace_pattern")) {
    (void)w;
    throw_bad_request("structured_outputs.whitespace_pattern",
                      "'structured_outputs.whitespace_pattern' is not supported");
  }
  r.ignore("disable_fallback");
  r.ignore("disable_any_whitespace");
  r.ignore("disable_additional_properties");
  r.reject_unknown();
  if (found.size() != 1) {
    throw_bad_request("structured_outputs",
                      "'structured_outputs' must set exactly one of json, regex, choice, grammar "
                      "and json_object ({} given)",
                      found.size());
  }
  return found.front();
}

}  // namespace

std::optional<StructuredOutput> parse_structured_output(FieldReader& r,
                                                        const RequestLimits& limits) {
  std::vector<StructuredOutput> found;
  if (auto f = response_format(r, limits)) found.push_back(std::move(*f));
  if (auto f = structured_outputs(r, limits)) found.push_back(std::move(*f));
  if (const json* j = r.get_raw("guided_json")) {
    found.push_back({GrammarSpec::json_schema(schema_text(*j, "guided_json", limits), false),
                     "guided_json"});
  }
  if (auto re = r.get_string("guided_regex", limits.max_string_bytes)) {
    found.push_back({GrammarSpec::regex(*re), "guided_regex"});
  }
  if (const json* c = r.get_raw("guided_choice")) {
    found.push_back({GrammarSpec::choice(choices_of(*c, "guided_choice")), "guided_choice"});
  }
  if (auto g = r.get_string("guided_grammar", limits.max_string_bytes)) {
    found.push_back({GrammarSpec::ebnf(*g), "guided_grammar"});
  }
  if (auto backend = r.get_string("guided_decoding_backend", 64)) {
    if (*backend != "xgrammar" && *backend != "auto") {
      throw_bad_request("guided_decoding_backend",
                        "'guided_decoding_backend' '{}' is not available: this server's grammar "
                        "engine is xgrammar (give 'xgrammar' or 'auto', or leave it out)",
                        *backend);
    }
  }
  if (r.get_raw("guided_whitespace_pattern") != nullptr) {
    throw_bad_request("guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported");
  }
  if (found.size() > 1) {
    throw_bad_request(found[1].param,
                      "'{}' and '{}' both constrain the output: give one of them", found[0].param,
                      found[1].param);
  }
  if (found.empty()) return std::nullopt;
  return std::move(found.front());
}

void keep_schema_key_order(std::string_view body, std::optional<StructuredOutput>& so) {
  if (!so || so->spec.kind != GrammarSpec::Kind::kJsonSchema) return;
  std::string pointer = "/" + so->param;
  std::replace(pointer.begin(), pointer.end(), '.', '/');
  const auto ordered = nlohmann::ordered_json::parse(body);
  const nlohmann::json_pointer<std::string> at(pointer);
  if (ordered.contains(at) && ordered.at(at).is_object()) so->spec.text = ordered.at(at).dump();
}

}  // namespace detllm::server
