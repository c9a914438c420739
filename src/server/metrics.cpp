// Prometheus text rendering of the server and engine statistics.
#include "server/metrics.h"

#include <fmt/format.h>

namespace detllm::server {

std::string prometheus_label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void Metrics::count_request(std::string_view endpoint, int status) {
  std::lock_guard lk(mu_);
  ++requests_[{std::string(endpoint), status}];
}

void Metrics::count_disconnect() {
  std::lock_guard lk(mu_);
  ++disconnects_;
}

void Metrics::add_in_flight(int32_t d) {
  std::lock_guard lk(mu_);
  in_flight_ += d;
}

void Metrics::connection_opened() {
  std::lock_guard lk(mu_);
  ++connections_open_;
  ++connections_total_;
}

void Metrics::connection_closed() {
  std::lock_guard lk(mu_);
  --connections_open_;
}

void Metrics::Histogram::observe(double v) {
  size_t b = 0;
  while (b < bounds.size() && v > bounds[b]) ++b;
  ++counts[b];
  sum += v;
}

void Metrics::Histogram::render(std::string& out, std::string_view name,
                                std::string_view help) const {
  auto app = std::back_inserter(out);
  fmt::format_to(app, "# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  int64_t cum = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cum += counts[i];
    fmt::format_to(app, "{}_bucket{{le=\"{}\"}} {}\n", name, bounds[i], cum);
  }
  cum += counts.back();
  fmt::format_to(app, "{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cum, name,
                 sum, name, cum);
}

void Metrics::observe_latency(double queue_s, double ttft_s, double tpot_s, double e2e_s) {
  std::lock_guard lk(mu_);
  if (queue_s >= 0) queue_.observe(queue_s);
  if (ttft_s >= 0) ttft_.observe(ttft_s);
  if (tpot_s >= 0) tpot_.observe(tpot_s);
  if (e2e_s >= 0) e2e_.observe(e2e_s);
}

void Metrics::count_timeout() {
  std::lock_guard lk(mu_);
  ++timeouts_;
}

int32_t Metrics::connections_open() const {
  std::lock_guard lk(mu_);
  return connections_open_;
}

int32_t Metrics::http_in_flight() const {
  std::lock_guard lk(mu_);
  return in_flight_;
}

namespace {

void header(std::string& out, std::string_view name, std::string_view type,
            std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename T>
void metric(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            T value) {
  header(out, name, type, help);
  fmt::format_to(std::back_inserter(out), "{} {}\n", name, value);
}

}  // namespace

std::string Metrics::render(const EngineSnapshot& s, const MetricsInfo& info) const {
  std::string out;
  auto app = std::back_inserter(out);
  header(out, "detllm_info", "gauge", "Server build and numerics fingerprint (value is always 1).");
  fmt::format_to(app,
                 "detllm_info{{version=\"{}\",backend=\"{}\",model=\"{}\",fingerprint=\"{}\","
                 "policy=\"{}\"}} 1\n",
                 prometheus_label(info.version), prometheus_label(info.backend),
                 prometheus_label(info.model), prometheus_label(info.fingerprint),
                 prometheus_label(info.policy));
  {
    std::lock_guard lk(mu_);
    header(out, "detllm_requests_total", "counter", "HTTP requests by endpoint and status.");
    for (const auto& [key, n] : requests_) {
      fmt::format_to(app, "detllm_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n",
                     prometheus_label(key.first), key.second, n);
    }
    metric(out, "detllm_client_disconnects_total", "counter",
           "Responses abandoned by their client (request aborted, KV freed).", disconnects_);
    metric(out, "detllm_http_connections", "gauge", "Open HTTP connections.",
           connections_open_);
    metric(out, "detllm_http_connections_total", "counter", "HTTP connections accepted.",
           connections_total_);
    metric(out, "detllm_http_timeouts_total", "counter",
           "Connections cut off because a request header or body, or a response write, took "
           "too long.",
           timeouts_);
    queue_.render(out, "detllm_request_queue_time_seconds",
                  "Time a generation request waited before the engine first ran it.");
    ttft_.render(out, "detllm_time_to_first_token_seconds",
                 "Time from a generation request's submission to its first token.");
    tpot_.render(out, "detllm_time_per_output_token_seconds",
                 "Time per output token after the first (the request's longest choice).");
    e2e_.render(out, "detllm_e2e_request_latency_seconds",
                "Time from a generation request's submission to its last token.");
  }
  metric(out, "detllm_http_requests_in_flight", "gauge", "HTTP requests being served.",
         info.http_in_flight);
  metric(out, "detllm_prompt_tokens_total", "counter", "Prompt tokens admitted to the engine.",
         s.n_prompt_tokens);
  metric(out, "detllm_generation_tokens_total", "counter", "Tokens generated.",
         s.n_generated_tokens);
  // Speculative decoding, under vLLM's names as its /metrics exposes them (prometheus_client
  // ends a counter's samples in _total; docs/speculative.md, docs/server.md).
  metric(out, "vllm:spec_decode_num_drafts_total", "counter",
         "Draft windows proposed (a sample's drafts before one step).", s.n_drafts);
  metric(out, "vllm:spec_decode_num_draft_tokens_total", "counter",
         "Draft tokens proposed by speculative decoding.", s.n_draft_tokens);
  metric(out, "vllm:spec_decode_num_accepted_tokens_total", "counter",
         "Draft tokens accepted (equal to the token decoding drew there).",
         s.n_accepted_draft_tokens);
  header(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Draft windows whose draft at this position (from 0) was accepted.");
  for (size_t i = 0; i < s.n_accepted_draft_tokens_per_pos.size(); ++i) {
    fmt::format_to(app,
                   "vllm:spec_decode_num_accepted_tokens_per_pos_total{{position=\"{}\"}} {}\n", i,
                   s.n_accepted_draft_tokens_per_pos[i]);
  }
  metric(out, "detllm_queue_length", "gauge",
         "Sequences waiting for admission (including requests not yet handed to the engine).",
         s.n_waiting);
  metric(out, "detllm_running_sequences", "gauge", "Sequences running in the engine.",
         s.n_running);
  metric(out, "detllm_engine_requests", "gauge", "HTTP requests inside the engine loop.",
         s.n_tickets);
  metric(out, "detllm_kv_blocks_total", "gauge", "KV cache blocks in the pool.",
         s.kv_blocks_total);
  metric(out, "detllm_kv_blocks_used", "gauge", "KV cache blocks held by sequences.",
         s.kv_blocks_used);
  metric(out, "detllm_kv_blocks_cached", "gauge",
         "Idle KV cache blocks holding a cached prefix (evictable).", s.kv_blocks_cached);
  metric(out, "detllm_prefix_cache_queried_tokens_total", "counter",
         "Prompt tokens looked up in the prefix cache.", s.prefix_query_tokens);
  metric(out, "detllm_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens found in the prefix cache.", s.prefix_hit_tokens);
  metric(out, "detllm_prefix_cache_hit_rate", "gauge",
         "Fraction of looked-up prompt tokens found in the prefix cache.",
         s.prefix_query_tokens == 0
             ? 0.0
             : static_cast<double>(s.prefix_hit_tokens) / static_cast<double>(s.prefix_query_tokens));
  metric(out, "detllm_aborted_requests_total", "counter",
         "Requests aborted before finishing (client gone or shutdown).", s.n_aborted);
  metric(out, "detllm_engine_errors_total", "counter", "Engine steps that failed.",
         s.n_engine_errors);
  header(out, "detllm_step_duration_seconds", "histogram", "Wall time of one engine step.");
  for (size_t i = 0; i < EngineSnapshot::kStepBuckets.size(); ++i) {
    fmt::format_to(app, "detllm_step_duration_seconds_bucket{{le=\"{}\"}} {}\n",
                   EngineSnapshot::kStepBuckets[i], s.step_buckets[i]);
  }
  fmt::format_to(app, "detllm_step_duration_seconds_bucket{{le=\"+Inf\"}} {}\n",
                 s.step_buckets.back());
  fmt::format_to(app, "detllm_step_duration_seconds_sum {}\n", s.step_seconds_sum);
  fmt::format_to(app, "detllm_step_duration_seconds_count {}\n", s.step_buckets.back());
  header(out, "detllm_self_check_status", "gauge",
         "Startup determinism self-check: 1 passed, -1 failed, 0 not run (see the label).");
  const int v = info.self_check == "passed" ? 1 : info.self_check == "failed" ? -1 : 0;
  fmt::format_to(app, "detllm_self_check_status{{state=\"{}\"}} {}\n",
                 prometheus_label(info.self_check), v);
  return out;
}

}  // namespace detllm::server
