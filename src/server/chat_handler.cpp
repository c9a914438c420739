// POST /v1/chat/completions: messages rendered with the model's chat template -> engine ->
// assistant messages, streamed or whole.
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/generation_stream.h"
#include "server/handlers.h"
#include "server/request_builder.h"

namespace detllm::server {

HttpReply handle_chat_completions(ServerContext& ctx, std::string_view body) {
  const ChatRequest req = parse_chat_request(parse_json_body(body), ctx.options.limits);
  check_model(ctx, req.gen.model);
  if (ctx.chat == nullptr) {
    throw ApiError(400,
                   "this model has no chat template, so /v1/chat/completions cannot format "
                   "messages; use /v1/completions with a prompt",
                   "invalid_request_error", "messages");
  }
  PromptState p;
  p.text = ctx.chat->render(req.messages, req.add_generation_prompt);
  // The template already holds the special tokens (BOS, role markers).
  p.ids = ctx.tokenizer->encode(p.text, /*add_special_tokens=*/false);
  check_prompt(ctx, p.ids, "messages");
  const int32_t max_tokens = resolve_max_tokens(ctx, req.gen, p.ids.size(), /*fallback=*/0);
  const BuiltRequests built = build_requests(ctx, req.gen, {p.ids}, max_tokens, -1);

  std::vector<PromptState> prompts;
  prompts.push_back(std::move(p));
  auto gen = std::make_unique<Generation>(*ctx.loop, *ctx.tokenizer, built.requests,
                                          std::move(prompts));
  gen->start();
  const ResponseMeta meta = make_meta(ctx, "chatcmpl", built);
  HttpReply reply;
  reply.headers = generation_headers(meta);
  StreamSpec spec;
  spec.api = StreamSpec::Api::kChat;
  spec.stream = req.gen.stream;
  spec.logprobs = req.gen.logprobs >= 0;
  spec.include_usage = req.gen.include_usage;
  // vLLM's chat echo: the reply continues the last message when it is the assistant's.
  if (req.echo && req.messages.back().role == "assistant") {
    spec.echo_text = req.messages.back().content;
  }
  if (spec.stream) reply.content_type = "text/event-stream";
  reply.stream = make_generation_stream(std::move(gen), meta, *ctx.tokenizer, spec);
  return reply;
}

}  // namespace detllm::server
