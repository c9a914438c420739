// Prometheus rendering: every metric the issue lists is present, counters accumulate, the
// step histogram is cumulative, label values are escaped.
#include <gtest/gtest.h>

#include "server/metrics.h"

namespace detllm::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(Metrics, RendersEveryMetric) {
  Metrics m;
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 400);
  m.count_disconnect();
  EngineSnapshot s;
  s.n_waiting = 3;
  s.n_running = 2;
  s.kv_blocks_total = 100;
  s.kv_blocks_used = 7;
  s.prefix_query_tokens = 10;
  s.prefix_hit_tokens = 4;
  s.n_prompt_tokens = 50;
  s.n_generated_tokens = 60;
  s.n_draft_tokens = 9;
  s.n_accepted_draft_tokens = 4;
  s.n_drafts = 3;
  s.n_accepted_draft_tokens_per_pos = {3, 1, 0};
  s.step_buckets = {};
  s.step_buckets[3] = 1;  // one step in (0.005, 0.01]
  for (size_t j = 4; j < s.step_buckets.size(); ++j) s.step_buckets[j] = 1;
  s.step_seconds_sum = 0.008;
  MetricsInfo info;
  info.version = "0.1.0";
  info.backend = "cpu";
  info.model = "m\"x";
  info.self_check = "passed";
  const std::string t = m.render(s, info);
  EXPECT_TRUE(has_line(t, "detllm_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2"));
  EXPECT_TRUE(has_line(t, "detllm_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 1"));
  EXPECT_TRUE(has_line(t, "detllm_client_disconnects_total 1"));
  EXPECT_TRUE(has_line(t, "detllm_prompt_tokens_total 50"));
  EXPECT_TRUE(has_line(t, "detllm_generation_tokens_total 60"));
  EXPECT_TRUE(has_line(t, "vllm:spec_decode_num_draft_tokens_total 9"));
  EXPECT_TRUE(has_line(t, "vllm:spec_decode_num_accepted_tokens_total 4"));
  EXPECT_TRUE(has_line(t, "vllm:spec_decode_num_drafts_total 3"));
  EXPECT_TRUE(has_line(t, "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 3"));
  EXPECT_TRUE(has_line(t, "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"2\"} 0"));
  EXPECT_TRUE(has_line(t, "detllm_queue_length 3"));
  EXPECT_TRUE(has_line(t, "detllm_running_sequences 2"));
  EXPECT_TRUE(has_line(t, "detllm_kv_blocks_used 7"));
  EXPECT_TRUE(has_line(t, "detllm_kv_blocks_total 100"));
  EXPECT_TRUE(has_line(t, "detllm_prefix_cache_hit_rate 0.4"));
  EXPECT_TRUE(has_line(t, "detllm_step_duration_seconds_bucket{le=\"0.005\"} 0"));
  EXPECT_TRUE(has_line(t, "detllm_step_duration_seconds_bucket{le=\"0.01\"} 1"));
  EXPECT_TRUE(has_line(t, "detllm_step_duration_seconds_bucket{le=\"+Inf\"} 1"));
  EXPECT_TRUE(has_line(t, "detllm_step_duration_seconds_count 1"));
  EXPECT_TRUE(has_line(t, "detllm_self_check_status{state=\"passed\"} 1"));
  EXPECT_NE(t.find("model=\"m\\\"x\""), std::string::npos);
  EXPECT_NE(t.find("# TYPE detllm_step_duration_seconds histogram"), std::string::npos);
}

TEST(Metrics, InFlightCounts) {
  Metrics m;
  m.http_begin();
  m.http_begin();
  m.http_end();
  EXPECT_EQ(m.http_in_flight(), 1);
}

}  // namespace
}  // namespace detllm::server
