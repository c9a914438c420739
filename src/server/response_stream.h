// ResponseStream: a response body produced over time (SSE chunks, or one JSON body once the
// engine is done), pumped by the HTTP layer from the connection's thread. Keeping this
// interface free of the HTTP library lets the tests drive handlers without sockets.
// Also the server-sent-events framing ("data: …\n\n", "data: [DONE]\n\n").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace detllm::server {

enum class PumpResult : uint8_t {
  kMore,    // call pump again
  kDone,    // the body is complete
  kFailed,  // a write failed (client gone): the request was cancelled
};

class ResponseStream {
 public:
  using Writer = std::function<bool(std::string_view)>;  // false: the client is gone
  virtual ~ResponseStream() = default;
  // Waits up to `wait` for output and writes what is ready.
  virtual PumpResult pump(const Writer& write, std::chrono::milliseconds wait) = 0;
  // The client went away (or the server stops): abort the engine work. Idempotent.
  virtual void cancel() = 0;
  // `notify` is called (from any thread, possibly after pump returned) whenever new output
  // may be ready, so the HTTP layer pumps again instead of holding a thread in pump's wait.
  // It may be called spuriously; it is never called after the stream is destroyed.
  virtual void set_notify(std::function<void()> notify) = 0;
  // Token counts for the request log; -1 when not known.
  virtual int32_t prompt_tokens() const { return -1; }
  virtual int32_t completion_tokens() const { return -1; }
  // Latencies for /metrics (seconds; -1 = not known): queue, time to first token, time per
  // output token, end to end.
  struct Latency {
    double queue_s = -1.0;
    double ttft_s = -1.0;
    double tpot_s = -1.0;
    double e2e_s = -1.0;
  };
  virtual Latency latency() const { return {}; }
};

// One server-sent event carrying `payload` (a JSON text without newlines).
inline std::string sse_event(std::string_view payload) {
  std::string s;
  s.reserve(payload.size() + 8);
  s += "data: ";
  s += payload;
  s += "\n\n";
  return s;
}
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace detllm::server
