// libFuzzer target for the chat output parsers (server/tools/): any model output given to each
// tool-call parser and reasoning parser must split without crashing, and keep the invariants:
// without calls the content is the text; with calls the content is a prefix of the text and
// every call's arguments are a JSON object; pushed in pieces of 3 bytes it gives what it gives
// whole. Build as tests/fuzz/http_body_fuzz.cpp says, then
//   ./build-fuzz/tests/tool_parser_fuzz -max_len=2048
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/tools/chat_output.h"
#include "server/tools/tool_parser.h"

namespace {

using namespace detllm::server;

struct Out {
  std::string reasoning, content, calls;
};

Out split(const ChatOutputConfig& cfg, std::string_view text, size_t piece) {
  ChatOutputSplitter s(cfg);
  Out o;
  auto add = [&](const ChatDelta& d) {
    o.reasoning += d.reasoning;
    o.content += d.content;
    for (const ToolCall& c : d.tool_calls) o.calls += c.id + "\n" + c.name + "\n" + c.arguments + "\n";
  };
  for (size_t i = 0; i < text.size(); i += piece) add(s.push(text.substr(i, piece)));
  add(s.finish());
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (auto kind : {ToolParserKind::kLlama3Json, ToolParserKind::kHermes, ToolParserKind::kMistral}) {
    const ToolParse p = parse_tool_calls(kind, text);
    if (p.calls.empty() && p.content != text) std::abort();
    if (!p.calls.empty() && text.compare(0, p.content.size(), p.content) != 0) std::abort();
    for (const ParsedCall& c : p.calls) {
      const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
      if (!args.is_object() || c.name.empty()) std::abort();
    }
    for (auto reasoning : {ReasoningParserKind::kNone, ReasoningParserKind::kQwen3,
                           ReasoningParserKind::kDeepSeekR1}) {
      ChatOutputConfig cfg;
      cfg.tools = kind;
      cfg.reasoning = reasoning;
      const Out whole = split(cfg, text, text.size() + 1);
      const Out pieces = split(cfg, text, 3);
      if (whole.reasoning != pieces.reasoning || whole.content != pieces.content ||
          whole.calls != pieces.calls) {
        std::abort();
      }
    }
  }
  return 0;
}
