// POST /v1/chat/completions: messages (and tools) rendered with the model's chat template ->
// engine -> assistant messages, streamed or whole, split by the reasoning and tool-call
// parsers.
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/generation_reply.h"
#include "server/tools/chat_output.h"
#include "server/tools/tool_call_schema.h"

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
  // tool_choice "required" or a named function: the output is a JSON array of calls, enforced
  // by a grammar of tool_call_schema (as vLLM does), whatever the model's own call format.
  GenerationFields gen = req.gen;
  const auto call_schema = tool_call_schema(req.tools, req.tool_choice, req.parallel_tool_calls);
  if (call_schema) {
    if (gen.structured) {
      throw ApiError(400,
                     fmt::format("'tool_choice' asks for a tool call and '{}' constrains the "
                                 "output too: give one of them",
                                 gen.structured->param),
                     "invalid_request_error", "tool_choice");
    }
    gen.structured = StructuredOutput{structured::GrammarSpec::json_schema(call_schema->dump()),
                                      "tool_choice"};
  }
  PromptState p;
  p.text = ctx.chat->render(req.messages, req.add_generation_prompt, req.tools,
                            req.chat_template_kwargs, req.continue_final_message);
  // The template already holds the special tokens (BOS, role markers).
  p.ids = ctx.tokenizer->encode(p.text, /*add_special_tokens=*/false);
  truncate_prompt(ctx, gen, p.ids);
  check_prompt(ctx, p.ids, "messages");
  const int32_t max_tokens = resolve_max_tokens(ctx, gen, p.ids.size(), /*fallback=*/0);
  BuiltRequests built = build_requests(ctx, gen, {p.ids}, max_tokens,
                                       gen.vllm.prompt_logprobs.value_or(-1));
  start_grammar_after_reasoning(ctx, built);

  StreamSpec spec;
  spec.api = StreamSpec::Api::kChat;
  spec.output.reasoning = ctx.reasoning_parser;
  if (req.parses_tool_calls()) spec.output.tools = ctx.tool_parser;
  spec.output.constrained_calls = call_schema.has_value();
  spec.output.id_key = tool_call_id_key(p.ids, built.seed);
  std::vector<PromptState> prompts;
  prompts.push_back(std::move(p));
  // vLLM's chat echo: the reply continues the last message when it is the assistant's.
  if (req.echo && req.messages.back().role == "assistant") {
    spec.echo_text = req.messages.back().content;
  }
  return start_generation_reply(ctx, gen, built, std::move(prompts), "chatcmpl",
                                std::move(spec));
}

}  // namespace detllm::server
