// The small endpoints: GET /v1/models, /health, /metrics; POST /tokenize, /detokenize.
#include <nlohmann/json.hpp>

#include "core/version.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/handlers.h"
#include "server/request_builder.h"
#include "server/response_format.h"

namespace detllm::server {

using json = nlohmann::json;

namespace {

HttpReply json_reply(const json& j, int status = 200) {
  HttpReply r;
  r.status = status;
  r.body = dump_json(j);
  return r;
}

json model_card(const ServerContext& ctx, const std::string& name) {
  json fields = json::object();
  for (const auto& [field, value] : ctx.fingerprint_fields) fields[field] = value;
  return {{"id", name},
          {"object", "model"},
          {"created", ctx.started_at},
          {"owned_by", "detllm"},
          {"root", ctx.model_name()},
          {"max_model_len", ctx.max_model_len},
          {"system_fingerprint", ctx.fingerprint(true)},
          {"fingerprint_fields", std::move(fields)}};
}

}  // namespace

HttpReply handle_models(ServerContext& ctx) {
  json data = json::array();
  for (const auto& name : ctx.options.model_names) data.push_back(model_card(ctx, name));
  return json_reply({{"object", "list"}, {"data", std::move(data)}});
}

HttpReply handle_model(ServerContext& ctx, std::string_view id) {
  for (const auto& name : ctx.options.model_names) {
    if (name == id) return json_reply(model_card(ctx, name));
  }
  throw ApiError(404,
                 fmt::format("the model '{}' does not exist: GET /v1/models lists the served "
                             "models",
                             id),
                 "invalid_request_error", "model", "model_not_found");
}

HttpReply handle_health(ServerContext& ctx) {
  if (ctx.draining) {
    return json_reply({{"status", "draining"}}, 503);
  }
  // Healthy also when the self-check failed: non-deterministic requests are still served.
  return json_reply(
      {{"status", "ok"}, {"model", ctx.model_name()}, {"self_check", ctx.self_check_status}});
}

HttpReply handle_metrics(ServerContext& ctx) {
  MetricsInfo info;
  info.version = std::string(engine_version());
  info.backend = ctx.backend_description;
  info.model = ctx.model_name();
  info.fingerprint = ctx.fingerprint(true);
  info.policy = ctx.policy_description;
  info.self_check = ctx.self_check_status;
  info.http_in_flight = ctx.metrics.http_in_flight();
  HttpReply r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = ctx.metrics.render(ctx.loop->snapshot(), info);
  return r;
}

HttpReply handle_tokenize(ServerContext& ctx, std::string_view body) {
  const TokenizeRequest req = parse_tokenize_body(body, ctx.options.limits);
  check_model(ctx, req.model);
  std::vector<int32_t> ids;
  if (req.prompt) {
    ids = ctx.tokenizer->encode(*req.prompt, req.add_special_tokens);
  } else {
    if (ctx.chat == nullptr) {
      throw ApiError(400, "this model has no chat template: tokenize a 'prompt' instead",
                     "invalid_request_error", "messages");
    }
    ids = ctx.tokenizer->encode(ctx.chat->render(req.messages, req.add_generation_prompt,
                                                 req.tools, req.chat_template_kwargs),
                                /*add_special_tokens=*/false);
  }
  return json_reply({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx.max_model_len}});
}

HttpReply handle_detokenize(ServerContext& ctx, std::string_view body) {
  const DetokenizeRequest req = parse_detokenize_request(parse_json_body(body), ctx.options.limits);
  check_model(ctx, req.model);
  for (size_t i = 0; i < req.tokens.size(); ++i) {
    if (req.tokens[i] >= ctx.vocab_size) {
      throw_bad_request("tokens", "'tokens[{}]' = {} is outside the vocabulary 0…{}", i,
                        req.tokens[i], ctx.vocab_size - 1);
    }
  }
  return json_reply({{"prompt", ctx.tokenizer->decode(req.tokens, false)}});
}

}  // namespace detllm::server
