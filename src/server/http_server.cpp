// cpp-httplib glue: routing, auth, headers, error bodies, streamed bodies (see http_server.h).
//
// Threads: cpp-httplib serves each connection on one thread of a fixed pool (--http-threads);
// a streaming response holds its thread until the stream ends, so the pool size bounds the
// number of concurrent streams (further connections wait in the pool's queue). A body
// produced over time is pumped in steps of at most kPumpWait; before each step we ask
// sink.is_writable() (select for writability + a MSG_PEEK read that sees the client's
// FIN/RST), so a client that disconnects is noticed within one step even while no token is
// ready, and its engine request is aborted.
#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "core/version.h"
#include "server/api_error.h"
#include "server/handlers.h"

namespace detllm::server {
namespace {

constexpr auto kPumpWait = std::chrono::milliseconds(50);

// Constant-time comparison, so the key cannot be guessed byte by byte from response times.
bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

std::string endpoint_label(const std::string& path) {
  static const char* const kRoutes[] = {"/v1/completions", "/v1/chat/completions",
                                        "/v1/models",      "/health",
                                        "/metrics",        "/tokenize",
                                        "/detokenize"};
  for (const char* r : kRoutes) {
    if (path == r) return r;
  }
  return "other";
}

// Counts an HTTP request in flight for as long as it lives.
class InFlight {
 public:
  explicit InFlight(Metrics& m) : m_(m) { m_.http_begin(); }
  ~InFlight() { m_.http_end(); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  Metrics& m_;
};

HttpReply error_reply(const ApiError& e) {
  HttpReply r;
  r.status = e.status();
  r.body = error_body(e);
  return r;
}

}  // namespace

struct HttpServer::Impl {
  ServerContext& ctx;
  httplib::Server svr;

  explicit Impl(ServerContext& c) : ctx(c) {}

  void apply(HttpReply&& reply, httplib::Response& res, std::shared_ptr<InFlight> guard) {
    res.status = reply.status;
    for (auto& [k, v] : reply.headers) res.set_header(k, v);
    if (!reply.stream) {
      res.set_content(reply.body, reply.content_type);
      return;
    }
    if (reply.content_type == "text/event-stream") {
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");
    }
    auto stream = std::move(reply.stream);
    Metrics* metrics = &ctx.metrics;
    res.set_chunked_content_provider(
        reply.content_type,
        [stream, guard](size_t, httplib::DataSink& sink) {
          // The library only notices a closed socket when a write fails; a response still
          // waiting for tokens would not write for a long time, so ask the socket first
          // (select for writability + a MSG_PEEK read that sees the client's FIN/RST).
          if (!sink.is_writable()) return false;
          const PumpResult r = stream->pump(
              [&sink](std::string_view s) { return sink.write(s.data(), s.size()); }, kPumpWait);
          if (r == PumpResult::kMore) return true;
          if (r == PumpResult::kDone) {
            sink.done();
            return true;
          }
          return false;
        },
        [stream, metrics](bool success) {
          if (!success) {
            metrics->count_disconnect();  // first: the abort it causes is seen after it
            stream->cancel();
          }
        });
  }

  template <typename Fn>
  httplib::Server::Handler wrap(Fn fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      auto guard = std::make_shared<InFlight>(ctx.metrics);
      HttpReply reply;
      try {
        reply = fn(req);
      } catch (const ApiError& e) {
        reply = error_reply(e);
      } catch (const detllm::Error& e) {
        reply = error_reply(ApiError(400, e.what()));
      } catch (const std::exception& e) {
        reply = error_reply(
            ApiError(500, std::string("internal server error: ") + e.what(), "server_error"));
      }
      apply(std::move(reply), res, std::move(guard));
    };
  }

  // Auth (all but /health) and the drain gate; runs before the body is read.
  httplib::Server::HandlerResponse pre_route(const httplib::Request& req,
                                             httplib::Response& res) {
    if (!ctx.options.api_key.empty() && req.path != "/health") {
      const std::string auth = req.get_header_value("Authorization");
      const std::string_view prefix = "Bearer ";
      const bool ok = auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
                      same_secret(std::string_view(auth).substr(prefix.size()),
                                  ctx.options.api_key);
      if (!ok) {
        res.status = 401;
        res.set_header("WWW-Authenticate", "Bearer");
        res.set_content(error_body(ApiError(401,
                                            auth.empty()
                                                ? "missing API key: send the header "
                                                  "'Authorization: Bearer <key>'"
                                                : "incorrect API key",
                                            "invalid_request_error", "", "invalid_api_key")),
                        "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (ctx.draining && req.method == "POST") {
      res.status = 503;
      res.set_content(error_body(ApiError(503, "the server is shutting down",
                                          "service_unavailable")),
                      "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  // Failures the library produces itself (no route, body too large, bad request line) get an
  // OpenAI error body too.
  httplib::Server::HandlerResponse on_error(const httplib::Request& req,
                                            httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    std::string message;
    std::string code;
    switch (res.status) {
      case 404: message = fmt::format("no route for {} {}", req.method, req.path); break;
      case 413:
        message = fmt::format("the request body is larger than {} bytes (--max-body-bytes)",
                              ctx.options.limits.max_body_bytes);
        code = "request_too_large";
        break;
      default: message = fmt::format("HTTP error {}", res.status); break;
    }
    res.set_content(
        error_body(ApiError(res.status, message, error_type_for_status(res.status), "", code)),
        "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }

  void routes() {
    svr.Post("/v1/completions", wrap([this](const httplib::Request& r) {
               return handle_completions(ctx, r.body);
             }));
    svr.Post("/v1/chat/completions", wrap([this](const httplib::Request& r) {
               return handle_chat_completions(ctx, r.body);
             }));
    svr.Get("/v1/models", wrap([this](const httplib::Request&) { return handle_models(ctx); }));
    svr.Get("/health", wrap([this](const httplib::Request&) { return handle_health(ctx); }));
    svr.Get("/metrics", wrap([this](const httplib::Request&) { return handle_metrics(ctx); }));
    svr.Post("/tokenize", wrap([this](const httplib::Request& r) {
               return handle_tokenize(ctx, r.body);
             }));
    svr.Post("/detokenize", wrap([this](const httplib::Request& r) {
               return handle_detokenize(ctx, r.body);
             }));
  }
};

HttpServer::HttpServer(ServerContext& ctx) : impl_(std::make_unique<Impl>(ctx)) {
  Impl& m = *impl_;
  const ServerOptions& o = ctx.options;
  const size_t n_threads = static_cast<size_t>(o.http_threads);
  m.svr.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  m.svr.set_payload_max_length(o.limits.max_body_bytes);
  m.svr.set_keep_alive_timeout(o.keep_alive_timeout_s);
  m.svr.set_keep_alive_max_count(1000);
  m.svr.set_tcp_nodelay(true);  // SSE chunks are small: send each at once
  m.svr.set_default_headers({{"X-Detllm-Version", std::string(engine_version())},
                             {"X-Detllm-Backend", ctx.backend_description},
                             {"X-Detllm-Determinism", ctx.policy_description}});
  m.svr.set_pre_routing_handler(
      [&m](const httplib::Request& req, httplib::Response& res) { return m.pre_route(req, res); });
  m.svr.set_error_handler(httplib::Server::HandlerWithResponse(
      [&m](const httplib::Request& req, httplib::Response& res) { return m.on_error(req, res); }));
  m.svr.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        res.status = 500;
        res.set_content(error_body(ApiError(500, "internal server error", "server_error")),
                        "application/json");
      });
  m.svr.set_logger([&ctx](const httplib::Request& req, const httplib::Response& res) {
    ctx.metrics.count_request(endpoint_label(req.path), res.status);
    if (ctx.options.log_requests) {
      std::fprintf(stderr, "detllm serve: %s %s %s -> %d\n", req.remote_addr.c_str(),
                   req.method.c_str(), req.path.c_str(), res.status);
    }
  });
  m.routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const ServerOptions& o = impl_->ctx.options;
  if (o.port == 0) {
    const int port = impl_->svr.bind_to_any_port(o.host);
    check(port > 0, "cannot listen on {} (any port): is the address valid?", o.host);
    return port;
  }
  check(impl_->svr.bind_to_port(o.host, o.port),
        "cannot listen on {}:{}: is the port in use, or the address not this machine's?",
        o.host, o.port);
  return o.port;
}

void HttpServer::serve() { impl_->svr.listen_after_bind(); }

void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace detllm::server
