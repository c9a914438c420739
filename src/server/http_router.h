// The routing of one parsed HTTP request, independent of the HTTP library: the route table
// (method + path, 404 for an unknown path, 405 with Allow for a known path and another
// method), Bearer auth (all but /health and CORS preflights), the drain gate, opt-in CORS
// and the OpenAI error body for every failure. The connection layer (http_connection) only
// frames bytes; this decides what a request means, so the tests drive it without sockets.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/handlers.h"
#include "server/server_context.h"

namespace detllm::server {

struct HttpRequestIn {
  std::string method;  // as sent: "GET", "POST", ...
  std::string target;  // the request-target as sent, not decoded: "/v1/models?x=1"
  bool has_authorization = false;
  std::string authorization;  // the Authorization header's value
  std::string origin;         // the Origin header's value ("" when absent)
  std::string body;
};

// The path of a request-target (origin form "/p?q", or absolute form "http://host/p?q"): up
// to '?' or '#'.
std::string_view target_path(std::string_view target);

// The metrics label of a path: a route ("/v1/completions", "/v1/models/{id}") or "other".
std::string_view endpoint_label(std::string_view path);

// Whether the request may be answered on the connection's I/O thread: it runs no handler
// that can block (everything but POST).
bool route_is_quick(const HttpRequestIn& req);
// Whether the request runs on the control pool rather than the worker pool: vLLM's RL control
// endpoints (/pause, /reset_prefix_cache, the weight transfer), which must get through while a pause holds
// generation requests in every worker. (/resume never blocks: it is quick.)
bool route_is_control(const HttpRequestIn& req);

// The reply to a request whose body has not been read, when its method, path and
// Authorization alone refuse it without the API key (401, or the 404/405 that come first):
// so a client without the key never gets a body or trailer of any size buffered.
// nullopt when the request is authorized (or no key is set).
std::optional<HttpReply> refuse_before_body(const ServerContext& ctx, const HttpRequestIn& head);

// The reply to `req`; never throws (handler exceptions become OpenAI error bodies).
HttpReply route_request(ServerContext& ctx, const HttpRequestIn& req);

// An error reply with the OpenAI body (also used by the connection for framing errors).
HttpReply error_reply(int status, std::string message, std::string code = {});

// Constant-time comparison, so a key cannot be guessed byte by byte from response times.
bool same_secret(std::string_view a, std::string_view b);

}  // namespace detllm::server
