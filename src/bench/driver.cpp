// detllm bench runs (driver.h): the request loop over one Engine and the metrics.
#include "bench/driver.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "engine/engine.h"
#include "model/config.h"
#include "model/llama_model.h"

namespace detllm::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

LatencySummary summarize(const std::vector<double>& v) {
  LatencySummary s;
  s.n = static_cast<int64_t>(v.size());
  if (v.empty()) return s;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  s.p50 = percentile(v, 50);
  s.p99 = percentile(v, 99);
  return s;
}

ClassLatency class_latency(const std::vector<RequestTiming>& requests, int which) {
  std::vector<double> ttft, tpot, e2e;
  for (const RequestTiming& t : requests) {
    if (which >= 0 && t.deterministic != (which == 1)) continue;
    if (t.output_tokens == 0) continue;
    ttft.push_back(1e3 * (t.first_token_s - t.arrival_s));
    e2e.push_back(1e3 * (t.finish_s - t.arrival_s));
    if (t.output_tokens > 1) {
      tpot.push_back(1e3 * (t.last_token_s - t.first_token_s) / (t.output_tokens - 1));
    }
  }
  return {summarize(ttft), summarize(tpot), summarize(e2e)};
}

RunResult run_bench(const LlamaModel& model, const engine::EngineConfig& config,
                    const Workload& workload, const RunSpec& spec, const SamplingSettings& sampling,
                    const ProgressFn& progress) {
  const auto n = static_cast<int32_t>(workload.requests.size());
  check(n >= 1, "run_bench: the workload has no requests");
  const std::vector<bool> det = deterministic_mask(n, spec.det_share, spec.seed);
  const std::vector<double> arrivals = spec.rate > 0.0
                                           ? poisson_arrivals(n, spec.rate, spec.seed)
                                           : std::vector<double>(static_cast<size_t>(n), 0.0);
  // No tokenizer: token ids in, token ids out, no EOS.
  engine::Engine eng(model, config, /*tokenizer=*/nullptr, spec.draft_model);

  RunResult res;
  if (spec.warm_graphs) res.n_warmup_graph_captures = eng.warm_up_decode_graphs().captures;
  res.rate = spec.rate;
  res.det_share = spec.det_share;
  res.n_requests = n;
  res.requests.resize(static_cast<size_t>(n));
  int64_t n_done = 0, n_tokens = 0;
  const auto t0 = Clock::now();
  auto add = [&](int32_t i) {
    const BenchRequest& b = workload.requests[static_cast<size_t>(i)];
    RequestTiming& t = res.requests[static_cast<size_t>(i)];
    t.deterministic = det[static_cast<size_t>(i)];
    t.prompt_tokens = static_cast<int32_t>(b.prompt.size());
    t.arrival_s = arrivals[static_cast<size_t>(i)];
    engine::Request r;
    r.prompt = b.prompt;
    r.max_tokens = b.output_len;
    r.ignore_eos = true;
    r.deterministic = t.deterministic;
    r.sampling.temperature = sampling.temperature;
    r.sampling.top_p = sampling.top_p;
    r.sampling.seed = sampling.seed + static_cast<uint64_t>(i);
    engine::RequestCallbacks cb;
    cb.on_token = [&t, &n_tokens, t0](const engine::TokenEvent&) {
      const double now = seconds_between(t0, Clock::now());
      if (t.output_tokens++ == 0) t.first_token_s = now;
      t.last_token_s = now;
      ++n_tokens;
    };
    cb.on_finish = [&t, &n_done, t0](int32_t, engine::FinishReason, const engine::Usage& u) {
      t.finish_s = seconds_between(t0, Clock::now());
      t.cached_tokens = u.cached_tokens;
      t.preemptions = u.preemptions;
      ++n_done;
    };
    eng.add_request(std::move(r), std::move(cb));
  };

  const LlamaModel::StepStats before = model.step_stats();
  double last_report = 0.0;
  int32_t next = 0;  // arrivals are ascending: requests join in workload order
  while (true) {
    const double now = seconds_between(t0, Clock::now());
    while (next < n && arrivals[static_cast<size_t>(next)] <= now) add(next++);
    if (eng.has_work()) {
      const auto s0 = Clock::now();
      const LlamaModel::StepStats m0 = model.step_stats();
      const int64_t computed0 = eng.stats().n_computed_tokens;
      const int64_t generated0 = eng.stats().n_generated_tokens;
      eng.step();
      const double ms = 1e3 * seconds_between(s0, Clock::now());
      const LlamaModel::StepStats& m1 = model.step_stats();
      RunResult::StepTrace st;
      st.ms = ms;
      st.computed_tokens = static_cast<int32_t>(eng.stats().n_computed_tokens - computed0);
      st.generated_tokens = static_cast<int32_t>(eng.stats().n_generated_tokens - generated0);
      st.padded = m1.n_padded_steps > m0.n_padded_steps;
      st.replayed = m1.n_graph_replays > m0.n_graph_replays;
      st.captured = m1.n_graph_captures > m0.n_graph_captures;
      res.steps.push_back(st);
    } else if (next < n) {
      std::this_thread::sleep_until(
          t0 + std::chrono::duration_cast<Clock::duration>(
                   std::chrono::duration<double>(arrivals[static_cast<size_t>(next)])));
    } else {
      break;
    }
    const double el = seconds_between(t0, Clock::now());
    if (progress && el - last_report >= spec.progress_interval_s) {
      last_report = el;
      progress({n_done, n, n_tokens, el, false});
    }
  }
  res.duration_s = seconds_between(t0, Clock::now());
  check(n_done == n, "the engine went idle with {} of {} requests unfinished", n - n_done, n);
  if (progress) progress({n_done, n, n_tokens, res.duration_s, true});

  for (int32_t i = 0; i < n; ++i) {
    const RequestTiming& t = res.requests[static_cast<size_t>(i)];
    const int32_t want = workload.requests[static_cast<size_t>(i)].output_len;
    check(t.output_tokens == want, "request {} produced {} tokens, expected {}", i, t.output_tokens,
          want);
    res.n_deterministic += t.deterministic;
    res.prompt_tokens += t.prompt_tokens;
    res.output_tokens += t.output_tokens;
  }
  const engine::EngineStats& es = eng.stats();
  const engine::KvCacheStats kv = eng.scheduler().kv_cache().stats();
  res.requests_per_s = n / res.duration_s;
  res.output_tokens_per_s = static_cast<double>(res.output_tokens) / res.duration_s;
  res.total_tokens_per_s =
      static_cast<double>(res.prompt_tokens + res.output_tokens) / res.duration_s;
  res.n_steps = es.n_steps;
  res.n_deterministic_steps = es.n_deterministic_steps;
  res.n_computed_tokens = es.n_computed_tokens;
  res.n_cached_tokens = es.n_cached_tokens;
  res.n_preemptions = eng.scheduler().stats().n_preemptions;
  res.n_verify_windows = es.n_verify_windows;
  res.n_verify_tokens = es.n_verify_tokens;
  res.n_rollbacks = es.n_rollbacks;
  res.n_rolled_back_tokens = es.n_rolled_back_tokens;
  res.n_drafts = es.n_drafts;
  res.n_draft_tokens = es.n_draft_tokens;
  res.n_accepted_draft_tokens = es.n_accepted_draft_tokens;
  res.prefix_hit_tokens = kv.n_hit_tokens;
  res.prefix_query_tokens = kv.n_query_tokens;
  std::vector<double> step_ms, padded_ms, unpadded_ms;  // from the step trace
  for (const RunResult::StepTrace& st : res.steps) {
    step_ms.push_back(st.ms);
    (st.padded ? padded_ms : unpadded_ms).push_back(st.ms);
  }
  res.step_ms = summarize(step_ms);
  res.padded_step_ms = summarize(padded_ms);
  res.unpadded_step_ms = summarize(unpadded_ms);
  const LlamaModel::StepStats& after = model.step_stats();
  res.n_padded_steps = after.n_padded_steps - before.n_padded_steps;
  res.n_graph_replays = after.n_graph_replays - before.n_graph_replays;
  res.n_graph_captures = after.n_graph_captures - before.n_graph_captures;
  res.det = class_latency(res.requests, 1);
  res.other = class_latency(res.requests, 0);
  res.all = class_latency(res.requests, -1);
  return res;
}

int32_t default_kv_cache_tokens(const Workload& workload, const ModelConfig& model,
                                int32_t block_size, int64_t max_bytes) {
  int64_t need = 0;
  for (const BenchRequest& r : workload.requests) {
    const int64_t len = static_cast<int64_t>(r.prompt.size()) + r.output_len;
    need += (len + block_size - 1) / block_size * block_size;
  }
  const int64_t bytes_per_token =
      int64_t{2} * model.n_layers * model.n_kv_heads * model.head_dim * 4;  // K and V, fp32
  const int64_t cap = std::max<int64_t>(max_bytes / bytes_per_token, workload.max_request_tokens());
  return static_cast<int32_t>(std::min<int64_t>({need + block_size, cap, int64_t{1} << 30}));
}

}  // namespace detllm::bench
