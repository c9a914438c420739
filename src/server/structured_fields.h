// The structured-output fields of a generation request (docs/server.md, "Structured output"),
// parsed into one GrammarSpec: OpenAI's response_format (json_object, json_schema with strict),
// vLLM's structured_outputs object and its older guided_json / guided_regex / guided_choice /
// guided_grammar fields. At most one of them may constrain a request (400 naming both
// otherwise). The grammar is compiled later, against the vocabulary (request_builder.cpp).
#pragma once

#include <optional>
#include <string>

#include "server/json_fields.h"
#include "server/server_options.h"
#include "structured/grammar_spec.h"

namespace detllm::server {

struct StructuredOutput {
  structured::GrammarSpec spec;
  std::string param;  // where it came from, for errors ("response_format.json_schema.schema")
};

// Reads (and marks as seen) response_format, structured_outputs, guided_json, guided_regex,
// guided_choice, guided_grammar, guided_decoding_backend and guided_whitespace_pattern.
// Throws ApiError 400 naming the field on a malformed value.
std::optional<StructuredOutput> parse_structured_output(FieldReader& r,
                                                        const RequestLimits& limits);

// A JSON schema given as an object, written again in the client's key order: the body parsed
// once more as ordered JSON. (The request parser's JSON sorts keys, and a schema's property
// order is the order the grammar asks for them.) Nothing for other kinds or a schema string.
void keep_schema_key_order(std::string_view body, std::optional<StructuredOutput>& so);

}  // namespace detllm::server
