// Chat output parsers chosen once at startup (see chat_parsers.h).
#include "server/chat_parsers.h"

#include "server/chat_prompt.h"

namespace detllm::server {
namespace {

std::vector<int32_t> special_ids(const Tokenizer* tokenizer,
                                 const std::vector<std::string_view>& markers) {
  std::vector<int32_t> ids;
  if (tokenizer == nullptr) return ids;
  for (std::string_view m : markers) {
    if (auto id = tokenizer->token_to_id(m); id && tokenizer->is_special(*id)) ids.push_back(*id);
  }
  return ids;
}

}  // namespace

void configure_chat_parsers(ServerContext& ctx) {
  const std::string& tools = ctx.options.tool_call_parser;
  if (tools == "auto") {
    ctx.tool_parser = ctx.chat ? detect_tool_parser(ctx.chat->source()) : ToolParserKind::kNone;
  } else {
    ctx.tool_parser = tool_parser_from_name(tools).value_or(ToolParserKind::kNone);
  }
  ctx.reasoning_parser =
      reasoning_parser_from_name(ctx.options.reasoning_parser).value_or(ReasoningParserKind::kNone);
  ctx.tool_marker_ids = special_ids(ctx.tokenizer, tool_parser_markers(ctx.tool_parser));
  ctx.reasoning_marker_ids =
      special_ids(ctx.tokenizer, reasoning_parser_markers(ctx.reasoning_parser));
  ctx.reasoning_end_ids.clear();
  ctx.reasoning_open_ids.clear();
  if (ctx.reasoning_parser == ReasoningParserKind::kNone || ctx.tokenizer == nullptr) return;
  if (ctx.reasoning_parser == ReasoningParserKind::kQwen3) {
    // Optional reasoning is told from the first token only where `<think>` is one token (the
    // thinking models' special token); else the grammar applies from the first token.
    std::vector<int32_t> open = ctx.tokenizer->encode("<think>", /*add_special_tokens=*/false);
    if (open.size() != 1) return;
    ctx.reasoning_open_ids = std::move(open);
  }
  ctx.reasoning_end_ids = ctx.tokenizer->encode("</think>", /*add_special_tokens=*/false);
}

}  // namespace detllm::server
