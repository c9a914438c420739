// Tool-call parsers: the model's completion text -> OpenAI tool calls + the text before them.
// One per output format (vLLM's --tool-call-parser names):
//
//   llama3_json  Llama 3.1/3.2: the output is {"name": ..., "parameters"|"arguments": {...}}
//                (after an optional <|python_tag|>), several separated by ';'
//   hermes       Qwen2.5, Qwen3, Hermes: <tool_call>{"name", "arguments"}</tool_call> blocks;
//                text before the first block is content
//   mistral      [TOOL_CALLS] followed by a JSON list of {"name", "arguments", "id"?}
//
// A parser works in two steps so that a stream can hold back text only while it may still be
// a call: find_section_start (where a call section begins, or may begin once more text comes)
// and parse_section (the calls of a section that runs to the end of the output; nullopt when
// it does not parse — then the section is content, never silently dropped).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace detllm::server {

enum class ToolParserKind : uint8_t { kNone, kLlama3Json, kHermes, kMistral };

// "none", "llama3_json", "hermes", "mistral"; nullopt for another name ("auto" is the
// caller's: detect_tool_parser).
std::optional<ToolParserKind> tool_parser_from_name(std::string_view name);
std::string_view tool_parser_name(ToolParserKind kind);
// The format a chat template teaches, from the markers in its source: <tool_call> -> hermes,
// [TOOL_CALLS] -> mistral, <|python_tag|> or "Environment: ipython" -> llama3_json; kNone
// when the template shows none (it does not render tools).
ToolParserKind detect_tool_parser(std::string_view template_source);
// The marker strings of a format ("<tool_call>", "</tool_call>"; "[TOOL_CALLS]"), which the
// output must keep where a tokenizer makes them special tokens.
std::vector<std::string_view> tool_parser_markers(ToolParserKind kind);

// A call as the model wrote it (its id is given by the response: tool_output.h).
struct ParsedCall {
  std::string name;
  std::string arguments;  // the arguments object as compact JSON (key order kept)
};

// Where a call section begins in `text` (the content so far): text[0, pos) is content for
// certain. `certain`: a whole start marker is at pos; else text[pos, end) could still become
// one (pos == text.size() when nothing is held). npos: no section can ever begin in this
// output (llama3_json, whose call is the whole output, after text that is not one).
struct SectionStart {
  size_t pos = std::string_view::npos;
  bool certain = false;
};
// `from`: text[0, from) was scanned before and held no start (an optimization for streams;
// a marker that straddles `from` is still found).
SectionStart find_section_start(ToolParserKind kind, std::string_view text, size_t from = 0);

// The calls of text[start, end) where start is a certain section start; nullopt when they do
// not parse.
std::optional<std::vector<ParsedCall>> parse_section(ToolParserKind kind,
                                                     std::string_view section);

// Whole output: {content, calls}. When no calls parse, content is the whole text.
struct ToolParse {
  std::string content;
  std::vector<ParsedCall> calls;
};
ToolParse parse_tool_calls(ToolParserKind kind, std::string_view text);

// Each format's parse_section (tool_parser_*.cpp).
std::optional<std::vector<ParsedCall>> parse_llama3_json_section(std::string_view section);
std::optional<std::vector<ParsedCall>> parse_hermes_section(std::string_view section);
std::optional<std::vector<ParsedCall>> parse_mistral_section(std::string_view section);

// One call object {"name": string, <args_key>: object} -> ParsedCall; nullopt when it is not
// one (shared by the parsers). `args_keys`: the accepted names of the arguments field, in
// order of preference.
std::optional<ParsedCall> call_from_json_text(std::string_view object_text,
                                              std::initializer_list<std::string_view> args_keys);
// A non-empty JSON list of call objects {"name", "arguments"} -> its calls; nullopt when the
// list is empty or an item is not such a call.
std::optional<std::vector<ParsedCall>> calls_from_json_list(const nlohmann::ordered_json& list);

}  // namespace detllm::server
