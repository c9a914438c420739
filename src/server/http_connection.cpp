// One HTTP/1.1 connection on Boost.Beast (see http_connection.h). Every member runs on the
// connection's strand; the worker pool and the engine thread reach it only by posting.
//
//   read:  [idle: --keep-alive-timeout] -> header [--header-timeout] -> body
//          [--request-timeout] -> queue (at most kMaxPipelined requests)   -> read again
//   write: queue front -> route (inline, or on a worker) -> whole body, or header + one
//          chunk at a time as the stream has output [each write: --write-timeout]
//
// A read deadline is armed only while no request is being answered: a long stream never
// makes the idle timeout fire. A client's FIN (or RST) while a generation is answered aborts
// it (the client is gone); replies already made for earlier requests are still written.
#include "server/http_connection.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <array>
#include <deque>
#include <optional>

#include "core/version.h"
#include "server/http_router.h"
#include "server/request_log.h"

namespace detllm::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using error_code = boost::system::error_code;

constexpr uint32_t kHeaderLimit = 16 * 1024;  // bytes of request line + headers
// The connection's read buffer. Bodies pass through it (the parser takes them as they come),
// but a chunked body's trailer section must fit in it whole: so this bounds the trailer, which
// no other limit covers, and a client cannot make the server buffer more than this.
constexpr size_t kReadBufferLimit = 64 * 1024;
constexpr size_t kMaxHeaders = 100;           // header fields
constexpr size_t kMaxPipelined = 16;          // requests read ahead of their response
constexpr size_t kLingerBytes = 64 << 20;     // read and dropped after an error reply
constexpr auto kLingerTime = std::chrono::seconds(2);
// A stream is also pumped this often without a notification (belt and braces).
constexpr auto kStreamPoll = std::chrono::seconds(2);

std::string to_string(beast::string_view s) { return std::string(s.data(), s.size()); }

bool has_control_byte(beast::string_view s) {
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) return true;
  }
  return false;
}

struct Pending {
  std::shared_ptr<HttpRequestIn> in;
  unsigned version = 11;
  bool keep_alive = true;
  Clock::time_point received;    // when the request was fully read
  std::shared_ptr<HttpReply> ready;  // a refused request's reply, made when it was read
};

class Connection final : public HttpConnection, public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket s, ConnectionEnv& env)
      : sock_(std::move(s)),
        env_(env),
        ctx_(env.ctx),
        buf_(kReadBufferLimit),
        read_timer_(sock_.get_executor()),
        write_timer_(sock_.get_executor()),
        poll_timer_(sock_.get_executor()) {
    error_code ec;
    const tcp::endpoint ep = sock_.remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    sock_.set_option(tcp::no_delay(true), ec);  // SSE chunks are small: send each at once
    ctx_.metrics.connection_opened();
  }

  ~Connection() override {
    end_in_flight();
    ctx_.metrics.connection_closed();
  }

  void start() {
    asio::post(sock_.get_executor(), [self = shared_from_this()] { self->begin_read(); });
  }

  void close() override {
    asio::post(sock_.get_executor(), [self = shared_from_this()] { self->close_now(); });
  }

 private:
  enum class Phase : uint8_t { kIdle, kHeader, kBody };

  // ---- reading ---------------------------------------------------------------------------

  void begin_read() {
    if (reading_ || closed_ || stop_reading_ || queue_.size() >= kMaxPipelined) return;
    reading_ = true;
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(ctx_.options.limits.max_body_bytes);
    phase_ = (n_requests_ == 0 || buf_.size() > 0) ? Phase::kHeader : Phase::kIdle;
    arm_read_timer();
    read_header_bytes();
  }

  // Reads until the buffer holds a whole header (or more than the header limit), so its raw
  // lines can be checked before Beast parses them: Beast joins a folded line (obs-fold) into
  // one value, which a proxy in front may frame differently (RFC 9112 5.2: reject it).
  void read_header_bytes() {
    const auto data = buf_.data();
    const std::string_view raw(static_cast<const char*>(data.data()), data.size());
    const size_t end = raw.find("\r\n\r\n");
    if (end != std::string_view::npos || raw.size() >= kHeaderLimit) {
      const std::string_view head = raw.substr(0, end == std::string_view::npos ? raw.size() : end);
      if (head.find("\r\n ") != std::string_view::npos ||
          head.find("\r\n\t") != std::string_view::npos) {
        reading_ = false;
        fail_request(400,
                     "a request header line is folded onto the next line (obs-fold): send each "
                     "header field on one line");
        return;
      }
      http::async_read_header(sock_, buf_, *parser_,
                              [self = shared_from_this()](error_code ec, size_t) {
                                self->on_header(ec);
                              });
      return;
    }
    const size_t n = std::min<size_t>(4096, kHeaderLimit - raw.size());
    sock_.async_read_some(buf_.prepare(n), [self = shared_from_this()](error_code ec, size_t got) {
      self->buf_.commit(got);
      if (ec) {
        self->on_read_error(ec);
        return;
      }
      if (self->closed_ || self->read_unwanted()) return;
      self->read_header_bytes();
    });
  }

  // The deadline of the read in progress; none while a request is being answered.
  void arm_read_timer() {
    ++read_timer_gen_;
    if (!reading_ || !queue_.empty()) {
      read_timer_.cancel();
      return;
    }
    const ServerOptions& o = ctx_.options;
    const int s = phase_ == Phase::kIdle     ? o.keep_alive_timeout_s
                  : phase_ == Phase::kHeader ? o.header_timeout_s
                                             : o.request_timeout_s;
    read_timer_.expires_after(std::chrono::seconds(s));
    read_timer_.async_wait([self = shared_from_this(), gen = read_timer_gen_](error_code ec) {
      if (!ec) self->on_read_timeout(gen);
    });
  }

  void on_read_timeout(uint64_t gen) {
    if (gen != read_timer_gen_ || !reading_ || closed_ || !queue_.empty()) return;
    if (writing_) {  // the 100 Continue is being written: wait for it
      arm_read_timer();
      return;
    }
    const bool got_bytes = buf_.size() > 0 || parser_->got_some();
    if (phase_ == Phase::kIdle && got_bytes) {
      // A request began just before the idle deadline: it gets the header's own time.
      phase_ = Phase::kHeader;
      arm_read_timer();
      return;
    }
    if (phase_ == Phase::kIdle) {
      close_now();  // an idle keep-alive connection: nothing to say
      return;
    }
    ctx_.metrics.count_timeout();
    error_code ec;
    sock_.cancel(ec);  // the pending read ends in read_unwanted(), then only watches
    fail_request(408,
                 phase_ == Phase::kHeader
                     ? fmt::format("the request header did not arrive within {} s",
                                   ctx_.options.header_timeout_s)
                     : fmt::format("the request body did not arrive within {} s",
                                   ctx_.options.request_timeout_s));
  }

  // Errors that mean the client is gone (or the socket was closed by us).
  static bool is_gone(const error_code& ec) {
    return ec == http::error::end_of_stream || ec == http::error::partial_message ||
           ec == asio::error::eof || ec == asio::error::connection_reset ||
           ec == asio::error::broken_pipe || ec == asio::error::operation_aborted ||
           ec == asio::error::bad_descriptor || ec == asio::error::not_connected;
  }

  // A Beast read ended after we stopped taking requests: just watch for the peer leaving.
  bool read_unwanted() {
    if (!stop_reading_ && !lingering_) return false;
    reading_ = false;
    watch_peer();
    return true;
  }

  void on_read_error(const error_code& ec) {
    reading_ = false;
    ++read_timer_gen_;
    if (closed_) return;
    if (read_unwanted()) return;
    if (is_gone(ec)) {
      on_peer_gone();
      return;
    }
    if (ec == http::error::header_limit) {
      fail_request(431, fmt::format("the request header is larger than {} bytes", kHeaderLimit));
    } else if (ec == http::error::buffer_overflow) {
      fail_request(431, fmt::format("the chunked body's trailer section is larger than the {} "
                                    "bytes a connection buffers",
                                    kReadBufferLimit));
    } else if (ec == http::error::body_limit) {
      HttpReply r = error_reply(
          413,
          fmt::format("the request body is larger than {} bytes (--max-body-bytes)",
                      ctx_.options.limits.max_body_bytes),
          "request_too_large");
      fail_with(std::move(r));
    } else {
      fail_request(400, fmt::format("malformed HTTP request: {}", ec.message()));
    }
  }

  void on_header(error_code ec) {
    if (ec) {
      on_read_error(ec);
      return;
    }
    if (closed_ || read_unwanted()) return;
    const auto& h = parser_->get();
    size_t n_fields = 0;
    for (const auto& f : h) {
      ++n_fields;
      if (has_control_byte(f.value()) || has_control_byte(f.name_string())) {
        reading_ = false;
        fail_request(400, "a request header contains a control character (NUL, CR or LF)");
        return;
      }
    }
    if (n_fields > kMaxHeaders) {
      reading_ = false;
      fail_request(431, fmt::format("the request has more than {} header fields", kMaxHeaders));
      return;
    }
    // Framing that two parsers could read differently (request smuggling) is refused.
    const size_t n_cl = h.count(http::field::content_length);
    const size_t n_te = h.count(http::field::transfer_encoding);
    if (n_cl > 1 || (n_cl > 0 && n_te > 0) || n_te > 1) {
      reading_ = false;
      fail_request(400,
                   "conflicting message framing: send one Content-Length, or "
                   "Transfer-Encoding: chunked alone");
      return;
    }
    if (n_te == 1 && !beast::iequals(h[http::field::transfer_encoding], "chunked")) {
      reading_ = false;
      fail_request(400, "only 'Transfer-Encoding: chunked' is supported");
      return;
    }
    // What the header says, kept apart from the fields a chunked trailer may add later.
    head_ = std::make_shared<HttpRequestIn>();
    head_->method = to_string(h.method_string());
    head_->target = to_string(h.target());
    if (auto it = h.find(http::field::authorization); it != h.end()) {
      head_->has_authorization = true;
      head_->authorization = to_string(it->value());
    }
    if (auto it = h.find(http::field::origin); it != h.end()) head_->origin = to_string(it->value());
    // A request refused without the API key is answered before any of its body is read (then
    // the connection closes): a client without the key gets nothing buffered.
    const bool has_body = n_te == 1 || (n_cl == 1 && parser_->content_length().value_or(0) > 0);
    if (has_body) {
      if (auto refused = refuse_before_body(ctx_, *head_)) {
        reading_ = false;
        fail_with(std::move(*refused), head_);
        return;
      }
    }
    phase_ = Phase::kBody;
    arm_read_timer();
    if (beast::iequals(h[http::field::expect], "100-continue") && queue_.empty() && !writing_) {
      auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      writing_ = true;
      asio::async_write(sock_, asio::buffer(*cont),
                        [self = shared_from_this(), cont](error_code wec, size_t) {
                          self->writing_ = false;
                          if (wec) {
                            self->on_read_error(wec);
                            return;
                          }
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(sock_, buf_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      self->on_body(ec);
    });
  }

  void on_body(error_code ec) {
    if (ec) {
      on_read_error(ec);
      return;
    }
    if (closed_ || read_unwanted()) return;
    reading_ = false;
    ++read_timer_gen_;
    read_timer_.cancel();
    auto msg = parser_->release();
    parser_.reset();
    Pending p;
    p.in = std::move(head_);  // trailer fields are read and ignored
    p.in->body = std::move(msg.body());
    p.version = msg.version();
    p.keep_alive = msg.keep_alive();
    p.received = Clock::now();
    ++n_requests_;
    if (!p.keep_alive) stop_reading_ = true;
    queue_.push_back(std::move(p));
    if (queue_.size() == 1) dispatch();
    if (stop_reading_) {
      watch_peer();
    } else {
      begin_read();
    }
  }

  // Reads and drops bytes only to see the client leave (after it said Connection: close, or
  // while lingering after an error reply).
  void watch_peer() {
    if (reading_ || closed_) return;
    reading_ = true;
    auto scratch = std::make_shared<std::array<char, 16384>>();
    sock_.async_read_some(asio::buffer(*scratch),
                          [self = shared_from_this(), scratch](error_code ec, size_t n) {
                            self->reading_ = false;
                            if (self->closed_) return;
                            self->lingered_ += n;
                            if (ec) {
                              if (self->lingering_) {
                                self->close_now();
                              } else {
                                self->on_peer_gone();
                              }
                              return;
                            }
                            if (self->lingering_ && self->lingered_ > kLingerBytes) {
                              self->close_now();
                              return;
                            }
                            self->watch_peer();
                          });
  }

  void on_peer_gone() {
    peer_gone_ = true;
    stop_reading_ = true;
    if (lingering_) {
      close_now();
      return;
    }
    if (stream_ && !last_chunk_in_flight_) {
      // A generation still being answered: its client left. Abort it, free its KV. (Once its
      // last chunk is being written, the answer is whole: a client that read it and closed at
      // once has not left early, and the request is finished, counted and logged as served.)
      ctx_.metrics.count_disconnect();
      close_now();
      return;
    }
    if (queue_.empty() && !writing_) close_now();
  }

  // ---- answering -------------------------------------------------------------------------

  void dispatch() {
    if (closed_ || queue_.empty() || answering_) return;
    answering_ = true;
    status_ = 0;
    begin_in_flight();
    arm_read_timer();  // busy: no read deadline
    if (auto ready = std::move(queue_.front().ready)) {
      on_reply(std::move(*ready));
      return;
    }
    std::shared_ptr<HttpRequestIn> in = queue_.front().in;
    if (route_is_quick(*in)) {
      on_reply(route_request(ctx_, *in));
      return;
    }
    std::weak_ptr<Connection> weak = shared_from_this();
    ServerContext* ctx = &ctx_;
    auto executor = sock_.get_executor();
    const auto& run = route_is_control(*in) ? env_.run_control : env_.run_blocking;
    run([weak, ctx, in, executor] {
      auto reply = std::make_shared<HttpReply>(route_request(*ctx, *in));
      asio::post(executor, [weak, reply] {
        if (auto self = weak.lock()) {
          self->on_reply(std::move(*reply));
        } else if (reply->stream) {
          reply->stream->cancel();
        }
      });
    });
  }

  template <typename Message>
  void add_headers(Message& m, const HttpReply& r, bool keep_alive) {
    m.set(http::field::content_type, r.content_type);
    m.set("X-Detllm-Version", env_.default_headers_version);
    m.set("X-Detllm-Backend", ctx_.backend_description);
    m.set("X-Detllm-Determinism", ctx_.policy_description);
    for (const auto& [k, v] : r.headers) m.set(k, v);
    m.keep_alive(keep_alive);
  }

  void on_reply(HttpReply r) {
    if (closed_) {
      if (r.stream) r.stream->cancel();
      return;
    }
    if (peer_gone_ && r.stream) {
      // The client left while its generation was being admitted.
      ctx_.metrics.count_disconnect();
      r.stream->cancel();
      close_now();
      return;
    }
    const Pending& p = queue_.front();
    status_ = r.status;
    // After this response the connection closes when the client asked, the server drains,
    // or the request was refused for its framing (then nothing after it can be trusted).
    keep_alive_ = p.keep_alive && !ctx_.draining && !peer_gone_;
    if (!keep_alive_) stop_reading_ = true;
    if (!r.stream) {
      auto res = std::make_shared<http::response<http::string_body>>(
          static_cast<http::status>(r.status), p.version);
      add_headers(*res, r, keep_alive_);
      res->body() = std::move(r.body);
      res->prepare_payload();
      start_write();
      http::async_write(sock_, *res, [self = shared_from_this(), res](error_code ec, size_t) {
        self->on_written(ec, /*done=*/true);
      });
      return;
    }
    stream_ = std::move(r.stream);
    // HTTP/1.0 has no chunked encoding. A whole JSON body to a client that asked for
    // keep-alive is collected and sent with its Content-Length; otherwise (SSE) the body is
    // sent as it comes and ends with the close.
    chunked_ = p.version >= 11;
    const bool sse = r.content_type == "text/event-stream";
    if (!chunked_ && keep_alive_ && !sse) {
      whole_ = std::make_shared<http::response<http::string_body>>(
          static_cast<http::status>(r.status), p.version);
      add_headers(*whole_, r, keep_alive_);
      watch_stream();
      return;
    }
    if (!chunked_) keep_alive_ = false;
    if (!keep_alive_) stop_reading_ = true;
    auto res = std::make_shared<http::response<http::empty_body>>(
        static_cast<http::status>(r.status), p.version);
    add_headers(*res, r, keep_alive_);
    if (sse) {
      res->set(http::field::cache_control, "no-cache");
      res->set("X-Accel-Buffering", "no");
    }
    res->chunked(chunked_);
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
    start_write();
    http::async_write_header(sock_, *sr,
                             [self = shared_from_this(), res, sr](error_code ec, size_t) {
                               self->on_written(ec, /*done=*/false);
                               if (!ec && self->stream_) self->watch_stream();
                             });
  }

  void watch_stream() {
    std::weak_ptr<Connection> weak = shared_from_this();
    auto executor = sock_.get_executor();
    // Runs on the engine thread. It must not hold the connection: dropping the last
    // reference there would destroy the stream inside its own notification.
    stream_->set_notify([weak, executor, pending = notify_pending_] {
      if (pending->exchange(true)) return;
      asio::post(executor, [weak] {
        if (auto s = weak.lock()) s->pump();
      });
    });
    arm_poll_timer();
    pump();
  }

  void arm_poll_timer() {
    poll_timer_.expires_after(kStreamPoll);
    poll_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || !self->stream_) return;
      self->pump();
      self->arm_poll_timer();
    });
  }

  // Writes what the stream has ready, one chunk in flight at a time.
  void pump() {
    *notify_pending_ = false;
    if (!stream_ || writing_ || closed_) return;
    std::string out;
    const PumpResult res = stream_->pump(
        [&out](std::string_view s) {
          out.append(s);
          return true;
        },
        std::chrono::milliseconds(0));
    if (res == PumpResult::kFailed) {
      close_now();
      return;
    }
    const bool done = res == PumpResult::kDone;
    if (whole_) {  // collected, then sent whole with its Content-Length
      whole_->body() += out;
      if (!done) return;
    }
    if (!done && out.empty()) return;  // wait for the next notification
    auto chunk = std::make_shared<std::string>();
    if (!chunked_) {
      *chunk = std::move(out);
    } else if (!out.empty()) {
      *chunk = fmt::format("{:x}\r\n", out.size());
      *chunk += out;
      *chunk += "\r\n";
    }
    if (done) {
      if (chunked_) *chunk += "0\r\n\r\n";
      prompt_tokens_ = stream_->prompt_tokens();
      completion_tokens_ = stream_->completion_tokens();
      if (status_ == 200) {
        const ResponseStream::Latency l = stream_->latency();
        ctx_.metrics.observe_latency(l.queue_s, l.ttft_s, l.tpot_s, l.e2e_s);
      }
    }
    last_chunk_in_flight_ = done;
    start_write();
    if (whole_) {
      auto res = std::move(whole_);
      res->prepare_payload();
      http::async_write(sock_, *res, [self = shared_from_this(), res](error_code ec, size_t) {
        self->on_written(ec, /*done=*/true);
      });
      return;
    }
    asio::async_write(sock_, asio::buffer(*chunk),
                      [self = shared_from_this(), chunk, done](error_code ec, size_t) {
                        self->on_written(ec, done);
                        if (!ec && !done) self->pump();
                      });
  }

  void start_write() {
    writing_ = true;
    ++write_timer_gen_;
    write_timer_.expires_after(std::chrono::seconds(ctx_.options.write_timeout_s));
    write_timer_.async_wait([self = shared_from_this(), gen = write_timer_gen_](error_code ec) {
      if (ec || gen != self->write_timer_gen_ || !self->writing_) return;
      // The client accepts no bytes: cut it off (a stream's request is aborted on close).
      self->ctx_.metrics.count_timeout();
      if (self->stream_) self->ctx_.metrics.count_disconnect();
      self->close_now();
    });
  }

  void on_written(const error_code& ec, bool done) {
    writing_ = false;
    last_chunk_in_flight_ = false;
    ++write_timer_gen_;
    write_timer_.cancel();
    if (closed_) return;
    if (ec) {
      if (stream_) ctx_.metrics.count_disconnect();
      close_now();
      return;
    }
    if (done) finish_response();
  }

  void finish_response() {
    const Pending p = std::move(queue_.front());
    queue_.pop_front();
    if (stream_) {
      stream_->set_notify(nullptr);
      stream_.reset();
      poll_timer_.cancel();
    }
    answering_ = false;
    const std::string_view path = target_path(p.in->target);
    ctx_.metrics.count_request(endpoint_label(path), status_);
    if (ctx_.options.log_requests) {
      RequestLogEntry e;
      e.remote = remote_;
      e.method = p.in->method;
      e.target = p.in->target;
      e.status = status_;
      e.latency_s = std::chrono::duration<double>(Clock::now() - p.received).count();
      e.prompt_tokens = prompt_tokens_;
      e.completion_tokens = completion_tokens_;
      const std::string line = format_request_log(e);
      std::fwrite(line.data(), 1, line.size(), stderr);
    }
    prompt_tokens_ = completion_tokens_ = -1;
    end_in_flight();
    if (!keep_alive_) {
      linger_close();
      return;
    }
    if (!queue_.empty()) {
      dispatch();
    } else if (peer_gone_) {
      close_now();
      return;
    }
    if (reading_) {
      if (phase_ == Phase::kIdle || (phase_ == Phase::kHeader && !parser_->got_some() &&
                                     buf_.size() == 0)) {
        phase_ = Phase::kIdle;
      }
      arm_read_timer();
    }
    begin_read();
  }

  // A request that cannot be served (bad framing, timeout): answer it after the replies
  // already due, then close. Nothing more is read from this connection.
  void fail_request(int status, std::string message) {
    fail_with(error_reply(status, std::move(message)));
  }

  void fail_with(HttpReply r, std::shared_ptr<HttpRequestIn> head = nullptr) {
    stop_reading_ = true;
    if (closed_) return;
    Pending p;
    p.in = head != nullptr ? std::move(head) : std::make_shared<HttpRequestIn>();
    if (p.in->method.empty()) p.in->method = "-";
    if (p.in->target.empty()) p.in->target = "-";
    p.version = 11;
    p.keep_alive = false;
    p.received = Clock::now();
    p.ready = std::make_shared<HttpReply>(std::move(r));
    queue_.push_back(std::move(p));
    if (queue_.size() == 1) dispatch();
  }

  // Closes after an error reply without losing it: the write side is shut, and what the
  // client still sends is read and dropped for a moment, so the kernel does not answer it
  // with a reset that could destroy the reply in flight.
  void linger_close() {
    if (closed_) return;
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) {
      close_now();
      return;
    }
    lingering_ = true;
    ++read_timer_gen_;
    read_timer_.expires_after(kLingerTime);
    read_timer_.async_wait([self = shared_from_this()](error_code tec) {
      if (!tec) self->close_now();
    });
    watch_peer();  // when a read is in progress, it ends in read_unwanted() -> watch_peer()
  }

  void close_now() {
    if (closed_) return;
    closed_ = true;
    // Requests read but not answered whole count once too: the one being answered with the
    // status it was answered with, or 499 (the client closed first) when no reply was made.
    for (size_t i = 0; i < queue_.size(); ++i) {
      const int status = i == 0 && answering_ && status_ != 0 ? status_ : 499;
      ctx_.metrics.count_request(endpoint_label(target_path(queue_[i].in->target)), status);
    }
    queue_.clear();
    error_code ec;
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
    read_timer_.cancel();
    write_timer_.cancel();
    poll_timer_.cancel();
    if (stream_) {
      stream_->set_notify(nullptr);
      stream_->cancel();
      stream_.reset();
    }
    whole_.reset();
    end_in_flight();
  }

  void begin_in_flight() {
    if (!in_flight_) ctx_.metrics.http_begin();
    in_flight_ = true;
  }
  void end_in_flight() {
    if (in_flight_) ctx_.metrics.http_end();
    in_flight_ = false;
  }

  tcp::socket sock_;
  ConnectionEnv& env_;
  ServerContext& ctx_;
  std::string remote_ = "-";
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<HttpRequestIn> head_;  // the request being read, from its header
  std::deque<Pending> queue_;  // read, not yet answered; the front is being answered
  std::shared_ptr<ResponseStream> stream_;  // the front's body, while it streams
  // An HTTP/1.0 keep-alive reply whose streamed body is being collected (see on_reply).
  std::shared_ptr<http::response<http::string_body>> whole_;
  asio::steady_timer read_timer_;
  asio::steady_timer write_timer_;
  asio::steady_timer poll_timer_;
  uint64_t read_timer_gen_ = 0;
  uint64_t write_timer_gen_ = 0;
  std::shared_ptr<std::atomic<bool>> notify_pending_ = std::make_shared<std::atomic<bool>>(false);
  Phase phase_ = Phase::kIdle;
  int64_t n_requests_ = 0;
  int status_ = 0;
  int32_t prompt_tokens_ = -1;
  int32_t completion_tokens_ = -1;
  size_t lingered_ = 0;
  bool reading_ = false;
  bool stop_reading_ = false;  // no more requests will be read
  bool writing_ = false;
  bool answering_ = false;
  bool keep_alive_ = true;
  bool chunked_ = true;  // the streamed body's framing (HTTP/1.1); HTTP/1.0: until close
  bool peer_gone_ = false;
  bool last_chunk_in_flight_ = false;  // a stream's final write is under way
  bool lingering_ = false;
  bool in_flight_ = false;
  bool closed_ = false;
};

}  // namespace

std::weak_ptr<HttpConnection> start_connection(tcp::socket socket, ConnectionEnv& env) {
  auto c = std::make_shared<Connection>(std::move(socket), env);
  c->start();
  return c;
}

}  // namespace detllm::server
