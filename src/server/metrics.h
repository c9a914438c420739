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
#include <vector>

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
  // One finished generation's latencies (seconds; < 0 = not known), vLLM's meanings.
  void observe_latency(double queue_s, double ttft_s, double tpot_s, double e2e_s);
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
  struct Histogram {
    std::vector<double> bounds;
    std::vector<int64_t> counts;  // per bucket (not cumulative), last = +Inf
    double sum = 0.0;
    explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1) {}
    void observe(double v);
    void render(std::string& out, std::string_view name, std::string_view help) const;
  };
  Histogram queue_{{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}};
  Histogram ttft_{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                   5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}};
  Histogram tpot_{{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                   7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram e2e_{{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                  60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}};
  int32_t connections_open_ = 0;
  int64_t connections_total_ = 0;
  int64_t timeouts_ = 0;
};

// Escapes a label value (backslash, quote, newline) for the text format.
std::string prometheus_label(std::string_view value);

}  // namespace detllm::server
