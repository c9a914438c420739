// Route table, auth, drain gate, CORS and error bodies (see http_router.h).
#include "server/http_router.h"

#include <array>
#include <optional>

#include "core/error.h"
#include "server/api_error.h"

namespace detllm::server {
namespace {

constexpr std::string_view kModelPrefix = "/v1/models/";

struct Route {
  std::string_view path;
  std::string_view method;
};

constexpr std::array<Route, 17> kRoutes = {{
    {"/v1/completions", "POST"},
    {"/v1/chat/completions", "POST"},
    {"/v1/models", "GET"},
    {"/health", "GET"},
    {"/metrics", "GET"},
    {"/tokenize", "POST"},
    {"/detokenize", "POST"},
    {"/pause", "POST"},
    {"/resume", "POST"},
    {"/is_paused", "GET"},
    {"/get_world_size", "GET"},
    {"/server_info", "GET"},
    {"/reset_prefix_cache", "POST"},
    {"/init_weight_transfer_engine", "POST"},
    {"/start_weight_update", "POST"},
    {"/update_weights", "POST"},
    {"/finish_weight_update", "POST"},
}};

// The route's method, or "" when the path is none of ours.
std::string_view route_method(std::string_view path) {
  for (const Route& r : kRoutes) {
    if (r.path == path) return r.method;
  }
  if (path.size() > kModelPrefix.size() && path.substr(0, kModelPrefix.size()) == kModelPrefix) {
    return "GET";
  }
  return {};
}

bool iequals_ascii(std::string_view a, std::string_view lower) {
  if (a.size() != lower.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char c = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    if (c != lower[i]) return false;
  }
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes a path segment; false on a bad escape or a decoded control character.
bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = hex_value(in[i + 1]);
      const int lo = hex_value(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
    out += c;
  }
  return true;
}

// The allowed origin to echo for this request, or "" (CORS off, or the origin not allowed).
std::string cors_allow(const ServerContext& ctx, const HttpRequestIn& req) {
  for (const std::string& o : ctx.options.cors_origins) {
    if (o == "*") return "*";
    if (!req.origin.empty() && o == req.origin) return o;
  }
  return {};
}

HttpReply api_error_reply(const ApiError& e) {
  HttpReply r;
  r.status = e.status();
  r.body = error_body(e);
  return r;
}

HttpReply dispatch(ServerContext& ctx, const HttpRequestIn& req, std::string_view path) {
  const std::string_view body = req.body;
  if (path == "/v1/completions") return handle_completions(ctx, body);
  if (path == "/v1/chat/completions") return handle_chat_completions(ctx, body);
  if (path == "/v1/models") return handle_models(ctx);
  if (path == "/health") return handle_health(ctx);
  if (path == "/metrics") return handle_metrics(ctx);
  if (path == "/tokenize") return handle_tokenize(ctx, body);
  if (path == "/detokenize") return handle_detokenize(ctx, body);
  if (path == "/pause") return handle_pause(ctx, req.target, body);
  if (path == "/resume") return handle_resume(ctx);
  if (path == "/is_paused") return handle_is_paused(ctx);
  if (path == "/get_world_size") return handle_get_world_size(ctx);
  if (path == "/server_info") return handle_server_info(ctx, req.target);
  if (path == "/reset_prefix_cache") return handle_reset_prefix_cache(ctx, body);
  if (path == "/init_weight_transfer_engine") return handle_init_weight_transfer_engine(ctx, body);
  if (path == "/start_weight_update") return handle_start_weight_update(ctx, body);
  if (path == "/update_weights") return handle_update_weights(ctx, body);
  if (path == "/finish_weight_update") return handle_finish_weight_update(ctx, body);
  std::string id;
  if (!percent_decode(path.substr(kModelPrefix.size()), id)) {
    throw ApiError(404, fmt::format("no model '{}': the id is not a valid path segment",
                                    path.substr(kModelPrefix.size())),
                   "invalid_request_error", "model", "model_not_found");
  }
  return handle_model(ctx, id);
}

bool authorized(const ServerContext& ctx, const HttpRequestIn& req, std::string_view path) {
  if (ctx.options.api_key.empty() || path == "/health") return true;
  const std::string_view prefix = "Bearer ";
  const std::string_view auth = req.authorization;
  return auth.size() > prefix.size() && auth.substr(0, prefix.size()) == prefix &&
         same_secret(auth.substr(prefix.size()), ctx.options.api_key);
}

// What the method, path and Authorization alone decide: 404, a CORS preflight, 405, 401.
std::optional<HttpReply> gate(const ServerContext& ctx, const HttpRequestIn& req) {
  const std::string_view path = target_path(req.target);
  const std::string_view method = route_method(path);
  const bool cors = !ctx.options.cors_origins.empty();
  if (method.empty()) {
    // No leak of the request line's bytes beyond what error_body escapes (JSON).
    return error_reply(404, fmt::format("no route for {} {}", req.method, path));
  }
  if (req.method == "OPTIONS" && cors) {
    HttpReply r;
    r.status = 204;
    r.headers.emplace_back("Access-Control-Allow-Methods", fmt::format("{}, OPTIONS", method));
    r.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
    r.headers.emplace_back("Access-Control-Max-Age", "600");
    return r;
  }
  if (req.method != method) {  // HEAD too: 405 like any other method
    HttpReply r = error_reply(
        405, fmt::format("{} does not take {}: use {}", path, req.method, method),
        "method_not_allowed");
    r.headers.emplace_back("Allow", cors ? fmt::format("{}, OPTIONS", method)
                                         : std::string(method));
    return r;
  }
  if (!authorized(ctx, req, path)) {
    HttpReply r = api_error_reply(ApiError(
        401,
        req.has_authorization ? "incorrect API key"
                              : "missing API key: send the header 'Authorization: Bearer <key>'",
        "invalid_request_error", "", "invalid_api_key"));
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  return std::nullopt;
}

HttpReply route_checked(ServerContext& ctx, const HttpRequestIn& req) {
  if (auto refused = gate(ctx, req)) return std::move(*refused);
  const std::string_view path = target_path(req.target);
  if (ctx.draining && req.method == "POST") {
    return api_error_reply(
        ApiError(503, "the server is shutting down", "service_unavailable"));
  }
  try {
    return dispatch(ctx, req, path);
  } catch (const ApiError& e) {
    return api_error_reply(e);
  } catch (const detllm::Error& e) {
    return api_error_reply(ApiError(400, e.what()));
  } catch (const std::exception& e) {
    return api_error_reply(
        ApiError(500, std::string("internal server error: ") + e.what(), "server_error"));
  }
}

}  // namespace

std::string_view target_path(std::string_view target) {
  // Absolute form (RFC 9112 3.2.2: "http://host/path?q", which a server must accept): the path
  // starts at the first '/' after the authority; an empty path is "/".
  for (const std::string_view scheme : {std::string_view("http://"), std::string_view("https://")}) {
    if (target.size() >= scheme.size() &&
        iequals_ascii(target.substr(0, scheme.size()), scheme)) {
      const std::string_view rest = target.substr(scheme.size());
      const size_t slash = rest.find_first_of("/?#");
      if (slash == std::string_view::npos || rest[slash] != '/') return "/";
      target = rest.substr(slash);
      break;
    }
  }
  const size_t q = target.find_first_of("?#");
  return q == std::string_view::npos ? target : target.substr(0, q);
}

std::optional<HttpReply> refuse_before_body(const ServerContext& ctx, const HttpRequestIn& head) {
  if (authorized(ctx, head, target_path(head.target))) return std::nullopt;
  return gate(ctx, head);
}

std::string_view endpoint_label(std::string_view path) {
  for (const Route& r : kRoutes) {
    if (r.path == path) return r.path;
  }
  if (route_method(path) == "GET") return "/v1/models/{id}";
  return "other";
}

bool route_is_quick(const HttpRequestIn& req) {
  return req.method != "POST" || target_path(req.target) == "/resume";
}

bool route_is_control(const HttpRequestIn& req) {
  const std::string_view p = target_path(req.target);
  return p == "/pause" || p == "/reset_prefix_cache" || p == "/init_weight_transfer_engine" ||
         p == "/start_weight_update" || p == "/update_weights" || p == "/finish_weight_update";
}

bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

HttpReply error_reply(int status, std::string message, std::string code) {
  return api_error_reply(
      ApiError(status, std::move(message), error_type_for_status(status), "", std::move(code)));
}

HttpReply route_request(ServerContext& ctx, const HttpRequestIn& req) {
  HttpReply r = route_checked(ctx, req);
  if (const std::string allow = cors_allow(ctx, req); !allow.empty()) {
    r.headers.emplace_back("Access-Control-Allow-Origin", allow);
    if (allow != "*") r.headers.emplace_back("Vary", "Origin");
    r.headers.emplace_back("Access-Control-Expose-Headers",
                           "X-Request-Id, X-Detllm-Seed, X-Detllm-Fingerprint");
  }
  return r;
}

}  // namespace detllm::server
