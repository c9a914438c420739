// POST /v1/completions: prompts (text or token ids, one or a list) -> engine -> choices,
// streamed or whole; echo + logprobs returns the prompt's own logprobs (scoring, as vLLM).
#include <algorithm>

#include "server/api_error.h"
#include "server/generation_reply.h"

namespace detllm::server {

HttpReply handle_completions(ServerContext& ctx, std::string_view body) {
  const CompletionRequest req = parse_completion_body(body, ctx.options.limits);
  check_model(ctx, req.gen.model);

  std::vector<PromptState> prompts;
  std::vector<std::vector<int32_t>> ids;
  size_t longest = 0;
  for (size_t i = 0; i < req.prompts.size(); ++i) {
    const PromptInput& in = req.prompts[i];
    const std::string param = req.prompts.size() == 1 ? "prompt" : fmt::format("prompt[{}]", i);
    PromptState p;
    if (in.text) {
      p.text = *in.text;
      p.ids = ctx.tokenizer->encode(p.text, /*add_special_tokens=*/true);
    } else {
      p.ids = in.ids;
    }
    const bool truncated = req.gen.vllm.truncate_prompt_tokens.has_value();
    truncate_prompt(ctx, req.gen, p.ids);
    if (truncated && in.text) p.text = ctx.tokenizer->decode(p.ids, /*skip_special_tokens=*/false);
    check_prompt(ctx, p.ids, param);
    if (!in.text) p.text = ctx.tokenizer->decode(p.ids, /*skip_special_tokens=*/false);
    longest = std::max(longest, p.ids.size());
    ids.push_back(p.ids);
    prompts.push_back(std::move(p));
  }
  const int32_t max_tokens = resolve_max_tokens(ctx, req.gen, longest, /*fallback=*/16);
  const bool score_prompt = req.echo && req.gen.logprobs >= 0;
  const int32_t prompt_logprobs = std::max(score_prompt ? req.gen.logprobs : -1,
                                           req.gen.vllm.prompt_logprobs.value_or(-1));
  const BuiltRequests built = build_requests(ctx, req.gen, ids, max_tokens, prompt_logprobs);

  StreamSpec spec;
  spec.api = StreamSpec::Api::kCompletion;
  spec.echo = req.echo;
  return start_generation_reply(ctx, req.gen, built, std::move(prompts), "cmpl",
                                std::move(spec));
}

}  // namespace detllm::server
