// Choosing the chat output parsers at startup: --tool-call-parser (auto: from the markers of
// the model's chat template) and --reasoning-parser, and the marker tokens their requests'
// output keeps although the vocabulary marks them special.
#pragma once

#include "server/server_context.h"

namespace detllm::server {

// Sets ctx.tool_parser, reasoning_parser, tool_marker_ids and reasoning_marker_ids from
// ctx.options, ctx.chat and ctx.tokenizer (options validated before).
void configure_chat_parsers(ServerContext& ctx);

}  // namespace detllm::server
