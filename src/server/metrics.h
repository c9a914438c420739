// Metrics: HTTP request counters plus the engine loop's snapshot, rendered in the Prometheus
// text exposition format for GET /metrics (requests, tokens in/out, queue length, running
// sequences, KV blocks, prefix-cache hit rate, step-time histogram, self-check status).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "server/engine_loop.h"

namespace detllm::server {

// Facts printed as labels of detllm_info and as the self-check gauge.
struct MetricsInfo {
  std::string version;
  std::string backend;
  std::string model;
  std::string fingerprint;
  std::string policy;
  std::string self_check;  // "passed" (1), "failed" (-1), "not_run" / "disabled" (0)
  int32_t http_in_flight = 0;
};

class Metrics {
 public:
  // One finished HTTP request. `endpoint` is a route ("/v1/completions") or "other".
  void count_request(std::string_view endpoint, int status);
  // A client that went away before its response was complete (its request was aborted).
  void count_disconnect();
  // Connections: opened / closed (the gauge must come back to its baseline: no leak), read
  // or write timeouts (slow clients cut off).
  void connection_opened();
  void connection_closed();
  void count_timeout();
  int32_t connections_open() const;
  void http_begin() { add_in_flight(1); }
  void http_end() { add_in_flight(-1); }
  int32_t http_in_flight() const;

  std::string render(const EngineSnapshot& s, const MetricsInfo& info) const;

 private:
  void add_in_flight(int32_t d);

  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  int64_t disconnects_ = 0;
  int32_t in_flight_ = 0;
  int32_t connections_open_ = 0;
  int64_t connections_total_ = 0;
  int64_t timeouts_ = 0;
};

// Escapes a label value (backslash, quote, newline) for the text format.
std::string prometheus_label(std::string_view value);

}  // namespace detllm::server
