// POST /v1/chat/completions: messages (and tools) rendered with the model's chat template ->
// engine -> assistant messages, streamed or whole, split by the reasoning and tool-call
// parsers.
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/generation_reply.h"
#include "server/tools/chat_output.h"

namespace detllm::server {

HttpReply handle_chat_completions(ServerContext& ctx, std::string_view body) {
  const ChatRequest req = parse_chat_body(body, ctx.options.limits);
  check_model(ctx, req.gen.model);
  if (ctx.chat == nullptr) {
    throw ApiError(400,
                   "this model has no chat template, so /v1/chat/completions cannot format "
                   "messages; use /v1/completions with a prompt",
                   "invalid_request_error", "messages");
  }
  const ToolChoice::Kind choice = req.tool_choice.kind;
  if ((choice == ToolChoice::Kind::kRequired || choice == ToolChoice::Kind::kNamed) &&
      ctx.tool_parser == ToolParserKind::kNone) {
    // Nothing would constrain the output nor read a call from it.
    throw ApiError(400,
                   "'tool_choice' asks for a tool call, but this server reads no tool calls from "
                   "this model's output (--tool-call-parser is none, or auto found no tool format "
                   "in the chat template): start detllm serve with --tool-call-parser NAME",
                   "invalid_request_error", "tool_choice");
  }
  PromptState p;
  p.text = ctx.chat->render(req.messages, req.add_generation_prompt, req.tools,
                            req.chat_template_kwargs);
  // The template already holds the special tokens (BOS, role markers).
  p.ids = ctx.tokenizer->encode(p.text, /*add_special_tokens=*/false);
  truncate_prompt(ctx, req.gen, p.ids);
  check_prompt(ctx, p.ids, "messages");
  const int32_t max_tokens = resolve_max_tokens(ctx, req.gen, p.ids.size(), /*fallback=*/0);
  const BuiltRequests built = build_requests(ctx, req.gen, {p.ids}, max_tokens,
                                             req.gen.vllm.prompt_logprobs.value_or(-1));

  StreamSpec spec;
  spec.api = StreamSpec::Api::kChat;
  spec.output.reasoning = ctx.reasoning_parser;
  // tool_choice "required" or a name is not enforced yet: the model's output is parsed as for
  // "auto" (tools/tool_call_schema.h is where a grammar will constrain it).
  if (req.parses_tool_calls()) spec.output.tools = ctx.tool_parser;
  spec.output.id_key = tool_call_id_key(p.ids, built.seed);
  std::vector<PromptState> prompts;
  prompts.push_back(std::move(p));
  // vLLM's chat echo: the reply continues the last message when it is the assistant's.
  if (req.echo && req.messages.back().role == "assistant") {
    spec.echo_text = req.messages.back().content;
  }
  return start_generation_reply(ctx, req.gen, built, std::move(prompts), "chatcmpl",
                                std::move(spec));
}

}  // namespace detllm::server
