// The endpoint handlers, independent of the HTTP library: a request body in, an HttpReply out
// (a status and JSON body, or a ResponseStream the HTTP layer pumps). They throw ApiError for
// client errors; the router turns that into the OpenAI error body.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/response_stream.h"
#include "server/server_context.h"

namespace detllm::server {

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;                                          // when stream is null
  std::vector<std::pair<std::string, std::string>> headers;  // extra response headers
  std::shared_ptr<ResponseStream> stream;                    // body produced over time
};

HttpReply handle_completions(ServerContext& ctx, std::string_view body);
HttpReply handle_chat_completions(ServerContext& ctx, std::string_view body);
HttpReply handle_models(ServerContext& ctx);
HttpReply handle_model(ServerContext& ctx, std::string_view id);  // GET /v1/models/{id}
HttpReply handle_health(ServerContext& ctx);
HttpReply handle_metrics(ServerContext& ctx);
HttpReply handle_tokenize(ServerContext& ctx, std::string_view body);
HttpReply handle_detokenize(ServerContext& ctx, std::string_view body);
// vLLM's RL control plane (weight_sync_handlers.cpp): pause/resume and the weight transfer.
HttpReply handle_pause(ServerContext& ctx, std::string_view target, std::string_view body);
HttpReply handle_resume(ServerContext& ctx);
HttpReply handle_is_paused(ServerContext& ctx);
HttpReply handle_get_world_size(ServerContext& ctx);
// GET /server_info?config_format=json: the served configuration under vLLM's names (what TRL's
// VLLMClient reads: model_config.logprobs_mode, weight_transfer_config).
HttpReply handle_server_info(ServerContext& ctx, std::string_view target);
// POST /reset_prefix_cache: EngineLoop::reset_prefix_cache; {"success": true, "dropped_blocks"}.
HttpReply handle_reset_prefix_cache(ServerContext& ctx, std::string_view body);
HttpReply handle_init_weight_transfer_engine(ServerContext& ctx, std::string_view body);
HttpReply handle_start_weight_update(ServerContext& ctx, std::string_view body);
HttpReply handle_update_weights(ServerContext& ctx, std::string_view body);
HttpReply handle_finish_weight_update(ServerContext& ctx, std::string_view body);

}  // namespace detllm::server
