// start_generation_reply (generation_reply.h): the tail of the two generation endpoints.
#include "server/generation_reply.h"

#include <memory>
#include <utility>

namespace detllm::server {

HttpReply start_generation_reply(ServerContext& ctx, const GenerationFields& gen,
                                 const BuiltRequests& built, std::vector<PromptState> prompts,
                                 std::string_view id_prefix, StreamSpec spec) {
  // The output parsers' marker tokens stay in the text they parse.
  std::vector<int32_t> kept;
  if (spec.output.tools != ToolParserKind::kNone) kept = ctx.tool_marker_ids;
  if (spec.output.reasoning != ReasoningParserKind::kNone) {
    kept.insert(kept.end(), ctx.reasoning_marker_ids.begin(), ctx.reasoning_marker_ids.end());
  }
  auto generation = std::make_unique<Generation>(*ctx.loop, *ctx.tokenizer, built.requests,
                                                 std::move(prompts), std::move(kept));
  generation->set_text_options(gen.vllm.skip_special_tokens,
                               gen.vllm.include_stop_str_in_output);
  generation->start();
  ResponseMeta meta = make_meta(ctx, id_prefix, built);
  if (const auto& id = generation->identity()) {
    // The weights the engine accepted the requests under (a weight update may have happened
    // while they waited to be admitted).
    if (!id->fingerprint(built.deterministic).empty()) {
      meta.fingerprint = id->fingerprint(built.deterministic);
    }
    meta.weight_version = id->version;
  }
  meta.tokens_as_ids = gen.vllm.return_tokens_as_token_ids;
  meta.prompt_logprobs = gen.vllm.prompt_logprobs.has_value();
  meta.token_ids = gen.vllm.return_token_ids;
  meta.routed_experts_k = gen.return_routed_experts ? ctx.n_experts_used : 0;
  HttpReply reply;
  reply.headers = generation_headers(meta);
  spec.stream = gen.stream;
  spec.logprobs = gen.logprobs >= 0;
  spec.include_usage = gen.include_usage;
  if (spec.stream) reply.content_type = "text/event-stream";
  reply.stream = make_generation_stream(std::move(generation), meta, *ctx.tokenizer, spec);
  return reply;
}

}  // namespace detllm::server
