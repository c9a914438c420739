// HttpServer: the HTTP layer (cpp-httplib, see docs/server.md for why): routes, Bearer auth,
// the X-Detllm-* headers, OpenAI error bodies for every failure (bad route, oversized body,
// handler errors), and the pumping of streamed bodies with client-disconnect detection. The
// only file that includes the HTTP library.
#pragma once

#include <memory>

#include "server/server_context.h"

namespace detllm::server {

class HttpServer {
 public:
  explicit HttpServer(ServerContext& ctx);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds ctx.options.host:port (port 0 = any free port) and returns the bound port. Throws
  // detllm::Error when the address cannot be bound.
  int bind();
  // Serves connections until stop(); blocks.
  void serve();
  // Stops accepting and ends every connection (open streams are cut, their requests
  // aborted). Thread-safe; serve() returns soon after.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace detllm::server
