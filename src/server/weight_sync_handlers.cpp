// vLLM's RL control endpoints on detllm serve: /pause, /resume, /is_paused, /get_world_size,
// /server_info, /reset_prefix_cache and the weight-transfer protocol (weight_sync.h). Query
// parameters as vLLM's: /pause?mode=wait.
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <map>

#include "kernels/sampling/sampling_params.h"
#include "server/api_error.h"
#include "server/handlers.h"
#include "server/openai_schema.h"
#include "server/response_format.h"
#include "server/weight_sync.h"

namespace detllm::server {

using json = nlohmann::json;

namespace {

HttpReply json_reply(const json& j) {
  HttpReply r;
  r.body = dump_json(j);
  return r;
}

// key=value pairs of a request-target's query (no percent-decoding: the values are words).
std::map<std::string, std::string> query_params(std::string_view target) {
  std::map<std::string, std::string> out;
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return out;
  std::string_view rest = target.substr(q + 1);
  if (const size_t hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view kv = rest.substr(0, amp);
    const size_t eq = kv.find('=');
    if (!kv.empty()) {
      out[std::string(kv.substr(0, eq))] = eq == std::string_view::npos ? "" : std::string(kv.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return out;
}

bool query_bool(const std::string& key, const std::string& v) {
  if (v == "true" || v == "True" || v == "1") return true;
  if (v == "false" || v == "False" || v == "0") return false;
  throw ApiError(400, fmt::format("query parameter {}={} is not a boolean (true or false)", key, v),
                 "invalid_request_error", key);
}

json optional_body(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return nullptr;
  return parse_json_body(body);
}

WeightSync& weight_sync(ServerContext& ctx) {
  if (ctx.weight_sync == nullptr) {
    throw ApiError(400, "this server does not take weight updates: " + ctx.weight_sync_refusal,
                   "invalid_request_error");
  }
  return *ctx.weight_sync;
}

}  // namespace

HttpReply handle_pause(ServerContext& ctx, std::string_view target, std::string_view body) {
  const json b = optional_body(body);
  if (!b.is_null() && !(b.is_object() && b.empty())) {
    throw ApiError(400, "/pause takes query parameters (mode, wait_for_inflight_requests, "
                        "clear_cache), not a body", "invalid_request_error");
  }
  PauseMode mode = PauseMode::kAbort;  // vLLM's default
  std::string mode_name = "abort";
  for (const auto& [key, v] : query_params(target)) {
    if (key == "mode") {
      if (v == "abort") mode = PauseMode::kAbort;
      else if (v == "wait") mode = PauseMode::kWait;
      else if (v == "keep") mode = PauseMode::kKeep;
      else throw ApiError(400, fmt::format("mode={}: abort (in-flight requests end with "
                                           "finish_reason abort), wait (they finish) or keep "
                                           "(they are held until /resume)", v),
                          "invalid_request_error", "mode");
      mode_name = v;
    } else if (key == "wait_for_inflight_requests") {
      // vLLM's older form of mode=wait.
      if (query_bool(key, v)) mode = PauseMode::kWait, mode_name = "wait";
    } else if (key == "clear_cache") {
      // Every weight update starts a new engine (empty KV pool and prefix cache), and with
      // unchanged weights a cached block gives the same bits as a recomputed one: there is
      // nothing else to clear. Checked, so a typo is still an error.
      (void)query_bool(key, v);
    } else {
      throw ApiError(400, fmt::format("unknown query parameter '{}' of /pause (mode, "
                                      "wait_for_inflight_requests, clear_cache)", key),
                     "invalid_request_error", key);
    }
  }
  ctx.loop->pause(mode);
  return json_reply({{"status", "paused"}, {"mode", mode_name}});
}

HttpReply handle_resume(ServerContext& ctx) {
  ctx.loop->resume();
  return json_reply({{"status", "resumed"}});
}

HttpReply handle_is_paused(ServerContext& ctx) {
  return json_reply({{"is_paused", ctx.loop->paused()}});
}

HttpReply handle_get_world_size(ServerContext& ctx) {
  return json_reply({{"world_size", ctx.world_size}});
}

HttpReply handle_server_info(ServerContext& ctx, std::string_view target) {
  bool as_json = false;  // vLLM's default config_format is text: the config as one string
  for (const auto& [key, v] : query_params(target)) {
    if (key != "config_format") {
      throw ApiError(400,
                     fmt::format("unknown query parameter '{}' of /server_info "
                                 "(config_format)",
                                 key),
                     "invalid_request_error", key);
    }
    if (v != "json" && v != "text") {
      throw ApiError(400, fmt::format("config_format={}: json or text", v), "invalid_request_error",
                     key);
    }
    as_json = v == "json";
  }
  json names = json::array();
  for (const auto& n : ctx.options.model_names) names.push_back(n);
  // vLLM's names for what a client reads. logprobs_mode: the engine reports the model's
  // logprobs before temperature and filters (docs/structured_output.md), vLLM's raw_logprobs.
  // The weight transfer takes a backend per /init_weight_transfer_engine call, not one fixed
  // at startup as vLLM's: both are listed; null without --weight-transfer.
  json config = {{"model_config",
                  {{"model", ctx.model_name()},
                   {"served_model_name", std::move(names)},
                   {"max_model_len", ctx.max_model_len},
                   {"max_logprobs", SamplingParams::kMaxLogprobs},
                   {"logprobs_mode", "raw_logprobs"}}},
                 {"parallel_config", {{"world_size", ctx.world_size}}},
                 {"weight_transfer_config",
                  ctx.weight_sync != nullptr ? json{{"backends", ctx.weight_sync->backends()}} : json(nullptr)},
                 {"detllm",
                  {{"backend", ctx.backend_description},
                   {"determinism", ctx.policy_description},
                   {"system_fingerprint", ctx.fingerprint(true)},
                   {"self_check", ctx.self_check_status}}}};
  return json_reply({{"vllm_config", as_json ? config : json(dump_json(config))}});
}

HttpReply handle_reset_prefix_cache(ServerContext& ctx, std::string_view body) {
  const json b = optional_body(body);
  if (!b.is_null() && !(b.is_object() && b.empty())) {
    throw ApiError(400, "/reset_prefix_cache takes no body", "invalid_request_error");
  }
  const int32_t dropped = ctx.loop->reset_prefix_cache();
  return json_reply({{"success", true}, {"dropped_blocks", dropped}});
}

HttpReply handle_init_weight_transfer_engine(ServerContext& ctx, std::string_view body) {
  WeightSync& w = weight_sync(ctx);
  return json_reply(w.init(parse_json_body(body)));
}

HttpReply handle_start_weight_update(ServerContext& ctx, std::string_view body) {
  WeightSync& w = weight_sync(ctx);
  return json_reply(w.start(optional_body(body)));
}

HttpReply handle_update_weights(ServerContext& ctx, std::string_view body) {
  WeightSync& w = weight_sync(ctx);
  return json_reply(w.update(parse_json_body(body)));
}

HttpReply handle_finish_weight_update(ServerContext& ctx, std::string_view body) {
  WeightSync& w = weight_sync(ctx);
  return json_reply(w.finish(optional_body(body)));
}

}  // namespace detllm::server
