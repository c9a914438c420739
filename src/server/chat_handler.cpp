// POST /v1/chat/completions: messages (and tools) rendered with the model's chat template ->
// engine -> assistant messages, streamed or whole.
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/generation_reply.h"

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
  PromptState p;
  p.text = ctx.chat->render(req.messages, req.add_generation_prompt, req.tools,
                            req.chat_template_kwargs);
  // The template already holds the special tokens (BOS, role markers).
  p.ids = ctx.tokenizer->encode(p.text, /*add_special_tokens=*/false);
  check_prompt(ctx, p.ids, "messages");
  const int32_t max_tokens = resolve_max_tokens(ctx, req.gen, p.ids.size(), /*fallback=*/0);
  const BuiltRequests built = build_requests(ctx, req.gen, {p.ids}, max_tokens, -1);

  std::vector<PromptState> prompts;
  prompts.push_back(std::move(p));
  StreamSpec spec;
  spec.api = StreamSpec::Api::kChat;
  // vLLM's chat echo: the reply continues the last message when it is the assistant's.
  if (req.echo && req.messages.back().role == "assistant") {
    spec.echo_text = req.messages.back().content;
  }
  return start_generation_reply(ctx, req.gen, built, std::move(prompts), "chatcmpl",
                                std::move(spec));
}

}  // namespace detllm::server
