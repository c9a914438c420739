// The listener: an exclusively bound acceptor, the Asio I/O threads that run every
// connection, and the worker pool for handlers that may block (see http_server.h).
//
//   acceptor ──► connection (strand) ── read / write, timers ──► I/O threads (kIoThreads)
//                     │ POST handler                ▲ reply, stream output ready
//                     ▼                             │ (asio::post)
//               worker pool (--http-threads) ───────┘      engine thread (Ticket notify)
#include "server/http_server.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/version.h"
#include "server/http_connection.h"

namespace detllm::server {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

// Connections only frame bytes and format; two threads keep up with the engine (the CPU
// engine and the GPU runner bound throughput long before), and leave the cores to it.
constexpr int kIoThreads = 2;
// The control pool (route_is_control): /pause?mode=wait and /finish_weight_update block until
// the engine settles; a few may wait at once.
constexpr int kControlThreads = 4;

// A fixed pool running jobs in FIFO order.
class WorkerPool {
 public:
  explicit WorkerPool(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
  }
  ~WorkerPool() { stop(); }

  void post(std::function<void()> job) {
    {
      std::lock_guard lk(mu_);
      if (stopping_) return;
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

  // Drops the jobs not started, waits for those running.
  void stop() {
    {
      std::lock_guard lk(mu_);
      if (stopping_ && threads_.empty()) return;
      stopping_ = true;
      jobs_.clear();
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

struct HttpServer::Impl {
  ServerContext& ctx;
  asio::io_context ioc{kIoThreads};
  asio::strand<asio::io_context::executor_type> accept_strand = asio::make_strand(ioc);
  tcp::acceptor acceptor{accept_strand};
  asio::steady_timer accept_retry{accept_strand};
  WorkerPool workers;
  WorkerPool control{kControlThreads};
  ConnectionEnv env;
  std::mutex mu;  // guards conns, stopping
  std::vector<std::weak_ptr<HttpConnection>> conns;
  bool stopping = false;
  size_t n_accepted = 0;

  explicit Impl(ServerContext& c)
      : ctx(c),
        workers(c.options.http_threads),
        env{c, [this](std::function<void()> job) { workers.post(std::move(job)); },
            [this](std::function<void()> job) { control.post(std::move(job)); },
            std::string(engine_version())} {}

  void accept() {
    acceptor.async_accept(asio::make_strand(ioc), [this](error_code ec, tcp::socket s) {
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
        // Out of file descriptors (or another transient failure): try again shortly
        // rather than spin; established connections keep being served.
        accept_retry.expires_after(std::chrono::milliseconds(100));
        accept_retry.async_wait([this](error_code tec) {
          if (!tec) accept();
        });
        return;
      }
      if (ctx.metrics.connections_open() >= ctx.options.max_connections) {
        error_code cec;
        s.close(cec);  // over --max-connections: refused at once (the client may retry)
      } else {
        std::weak_ptr<HttpConnection> c = start_connection(std::move(s), env);
        std::lock_guard lk(mu);
        if (stopping) {
          if (auto p = c.lock()) p->close();
        } else {
          if (++n_accepted % 256 == 0) {
            std::erase_if(conns, [](const auto& w) { return w.expired(); });
          }
          conns.push_back(std::move(c));
        }
      }
      accept();
    });
  }
};

HttpServer::HttpServer(ServerContext& ctx) : impl_(std::make_unique<Impl>(ctx)) {}

HttpServer::~HttpServer() {
  stop();
  impl_->workers.stop();
  impl_->control.stop();
}

int HttpServer::bind() {
  const ServerOptions& o = impl_->ctx.options;
  error_code ec;
  asio::ip::address addr = asio::ip::make_address(o.host, ec);
  if (ec) {
    tcp::resolver resolver(impl_->ioc);
    auto results = resolver.resolve(o.host, "", ec);
    check(!ec && !results.empty(), "cannot listen on {}: the host does not resolve ({}); give an "
          "address such as 127.0.0.1 or 0.0.0.0", o.host, ec.message());
    addr = results.begin()->endpoint().address();
  }
  const tcp::endpoint ep(addr, static_cast<unsigned short>(o.port));
  tcp::acceptor& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  check(!ec, "cannot open a socket for {}: {}", o.host, ec.message());
  // SO_REUSEADDR only (a restart may bind while old connections are in TIME_WAIT); never
  // SO_REUSEPORT, which would let a second server share the port and split the traffic.
  a.set_option(tcp::acceptor::reuse_address(true), ec);
  a.bind(ep, ec);
  if (ec == asio::error::address_in_use) {
    throw Error(fmt::format(
        "cannot listen on {}:{}: the port is in use (another detllm serve?). Stop that "
        "process or choose another --port",
        o.host, o.port));
  }
  check(!ec, "cannot listen on {}:{}: {} (is the address this machine's?)", o.host, o.port,
        ec.message());
  a.listen(asio::socket_base::max_listen_connections, ec);
  check(!ec, "cannot listen on {}:{}: {}", o.host, o.port, ec.message());
  return a.local_endpoint().port();
}

void HttpServer::serve() {
  Impl& m = *impl_;
  {
    std::lock_guard lk(m.mu);
    if (m.stopping) return;
  }
  asio::post(m.accept_strand, [&m] { m.accept(); });
  std::vector<std::thread> threads;
  for (int i = 1; i < kIoThreads; ++i) threads.emplace_back([&m] { m.ioc.run(); });
  m.ioc.run();
  for (auto& t : threads) t.join();
}

void HttpServer::stop() {
  Impl& m = *impl_;
  std::vector<std::weak_ptr<HttpConnection>> conns;
  {
    std::lock_guard lk(m.mu);
    if (m.stopping) return;
    m.stopping = true;
    conns.swap(m.conns);
  }
  asio::post(m.accept_strand, [&m] {
    error_code ec;
    m.acceptor.close(ec);
    m.accept_retry.cancel();
  });
  for (auto& w : conns) {
    if (auto c = w.lock()) c->close();
  }
}

}  // namespace detllm::server
