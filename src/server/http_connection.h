// HttpConnection: one client connection, served without a thread of its own (Boost.Beast on
// Asio; docs/server.md says why). It reads requests with Beast's parser (header and body
// limits for every transfer encoding, header/body deadlines, smuggling-prone framing
// refused), queues pipelined requests and answers them in order, runs handlers that may
// block on the worker pool, and writes streamed bodies chunk by chunk as the engine produces
// them: one write in flight at a time, so a client that stops reading makes the server hold
// at most one chunk and is cut off after --write-timeout.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <functional>
#include <memory>

#include "server/server_context.h"

namespace detllm::server {

struct ConnectionEnv {
  ServerContext& ctx;
  // Runs a job on the worker pool (handlers that may block).
  std::function<void(std::function<void()>)> run_blocking;
  // Runs a job on the control pool (route_is_control: /pause, the weight transfer): not
  // behind generation requests, which a pause may hold in every worker.
  std::function<void(std::function<void()>)> run_control;
  std::string default_headers_version;  // X-Detllm-Version
};

class HttpConnection {
 public:
  virtual ~HttpConnection() = default;
  // Closes the connection at once (server stop): a response in progress is cut, its engine
  // work aborted. Thread-safe.
  virtual void close() = 0;
};

// Starts serving `socket` (whose executor must be a strand). The connection keeps itself
// alive while it has work; the returned weak handle lets the server close it.
std::weak_ptr<HttpConnection> start_connection(boost::asio::ip::tcp::socket socket,
                                               ConnectionEnv& env);

}  // namespace detllm::server
