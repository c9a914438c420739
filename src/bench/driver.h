// detllm bench runs: one workload through a fresh engine::Engine on a model, offline (every
// request queued at t = 0, run until idle: throughput) or online (Poisson arrivals at a rate,
// the engine stepped in between: TTFT, TPOT, end-to-end latency per deterministic / other
// request). The engine is measured directly, not the HTTP server. One thread; the clock is
// steady_clock. Percentiles follow numpy's default (linear interpolation).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "bench/workload.h"
#include "engine/engine_config.h"

namespace detllm {
class LlamaModel;
struct ModelConfig;
}  // namespace detllm

namespace detllm::bench {

struct SamplingSettings {
  float temperature = 0.0f;  // 0 = greedy
  float top_p = 1.0f;
  uint64_t seed = 0;  // request i draws with seed + i
};

struct RunSpec {
  double rate = 0.0;       // requests/s (Poisson arrivals); 0 = offline: all at t = 0
  double det_share = 100;  // percent of requests marked deterministic (deterministic_mask)
  uint64_t seed = 0;       // the deterministic mask and the arrivals
  double progress_interval_s = 2.0;  // progress callback at most this often (and at the end)
  // Capture the run's engine's decode graphs before the clock starts, as `serve` does at
  // startup (Engine::warm_up_decode_graphs; nothing on a backend without graphs). Off: the run
  // captures each graph in its first step of that shape, inside the timing (the bench before
  // 2026-12-02).
  bool warm_graphs = true;
  // The draft model of speculative method draft_model (EngineConfig::speculative); nullptr
  // for the other methods. It must outlive the run.
  const LlamaModel* draft_model = nullptr;
};

struct RunProgress {
  int64_t n_done = 0;
  int64_t n_total = 0;
  int64_t n_tokens = 0;  // generated so far
  double elapsed_s = 0.0;
  bool finished = false;
};
using ProgressFn = std::function<void(const RunProgress&)>;

// One request's timeline, seconds from the run's start.
struct RequestTiming {
  bool deterministic = false;
  int32_t prompt_tokens = 0;
  int32_t output_tokens = 0;  // generated
  int32_t cached_tokens = 0;  // prompt tokens from the prefix cache
  int32_t preemptions = 0;
  double arrival_s = 0.0;
  double first_token_s = 0.0;
  double last_token_s = 0.0;
  double finish_s = 0.0;
};

struct LatencySummary {
  int64_t n = 0;
  double mean = 0.0, p50 = 0.0, p99 = 0.0;
};
double percentile(std::vector<double> v, double q);  // numpy's default; 0 for an empty v
LatencySummary summarize(const std::vector<double>& v);

// TTFT = first token − arrival; TPOT = (last − first token) / (output − 1), requests with > 1
// output token; end-to-end = finish − arrival. Milliseconds.
struct ClassLatency {
  LatencySummary ttft_ms, tpot_ms, e2e_ms;
};
ClassLatency class_latency(const std::vector<RequestTiming>& requests,
                           int which);  // 1 det, 0 other, -1 all

struct RunResult {
  double rate = 0.0;  // 0 = offline
  double det_share = 0.0;
  int64_t n_requests = 0, n_deterministic = 0;
  double duration_s = 0.0;  // first arrival (t = 0) to the last finish
  int64_t prompt_tokens = 0, output_tokens = 0;
  double requests_per_s = 0.0, output_tokens_per_s = 0.0, total_tokens_per_s = 0.0;
  int64_t n_steps = 0;
  // Steps that held a row of a deterministic request: the steps that ran as the mode needs
  // (docs/modes.md, "Mixed traffic"); the others ran fast.
  int64_t n_deterministic_steps = 0;
  int64_t n_computed_tokens = 0;  // run through the model, recompute included
  int64_t n_cached_tokens = 0;    // prompt tokens skipped thanks to the prefix cache
  int64_t n_preemptions = 0;
  int64_t prefix_hit_tokens = 0, prefix_query_tokens = 0;
  // The verified mode (LLM-42; zero elsewhere): windows verified, rows recomputed to verify them,
  // verifications that found a mismatch, candidates discarded — LLM-42's table 2.
  int64_t n_verify_windows = 0, n_verify_tokens = 0, n_rollbacks = 0, n_rolled_back_tokens = 0;
  double verify_share() const {
    return n_computed_tokens ? static_cast<double>(n_verify_tokens) / n_computed_tokens : 0.0;
  }
  // Speculative decoding (EngineConfig::speculative; zero without it), vLLM's counters: draft
  // windows proposed (a sample's drafts before one step), draft tokens proposed, and accepted.
  int64_t n_drafts = 0, n_draft_tokens = 0, n_accepted_draft_tokens = 0;
  double acceptance_rate() const {  // accepted / proposed draft tokens
    return n_draft_tokens ? static_cast<double>(n_accepted_draft_tokens) / n_draft_tokens : 0.0;
  }
  // vLLM's mean acceptance length: tokens a window yields, its accepted drafts and the token
  // drawn after them, 1 + accepted / windows.
  double mean_accepted_length() const {
    return n_drafts ? 1.0 + static_cast<double>(n_accepted_draft_tokens) / n_drafts : 0.0;
  }
  LatencySummary step_ms;
  // The model's own step counters over the run (LlamaModel::step_stats): decode steps padded to
  // a bucket, of which replayed from a CUDA graph, and graphs captured; and step_ms split into
  // the padded (decode-only) steps and the others (prompt chunks, alone or beside decode rows,
  // and decode steps that ran unpadded: every step on a backend without graphs under kAuto).
  int64_t n_padded_steps = 0, n_graph_replays = 0, n_graph_captures = 0;
  int64_t n_warmup_graph_captures = 0;  // before the clock started (RunSpec::warm_graphs)
  LatencySummary padded_step_ms, unpadded_step_ms;
  // Every step of the run in order (`detllm bench --step-trace`): what it computed and how it
  // ran, to tell apart where a mode's steps lose time.
  struct StepTrace {
    double ms = 0.0;
    int32_t computed_tokens = 0;   // tokens run through the model (prompt chunks + decode rows)
    int32_t generated_tokens = 0;  // tokens generated (rows sampled)
    bool padded = false, replayed = false, captured = false;
  };
  std::vector<StepTrace> steps;
  ClassLatency det, other, all;
  std::vector<RequestTiming> requests;  // (n_requests), workload order
  // --repeat: the duration of every repetition in run order (this result is the median one,
  // bench/warmup_repeat.h); empty when the run was made once.
  std::vector<double> repeat_durations_s;

  bool online() const { return rate > 0.0; }
  double prefix_hit_rate() const {
    return prefix_query_tokens ? static_cast<double>(prefix_hit_tokens) / prefix_query_tokens : 0.0;
  }
};

// Runs `workload` through a new Engine(model, config) — requests greedy or as `sampling`,
// ignore_eos, max_tokens = output_len, deterministic per spec's mask — and checks that every
// request produced exactly its output length. Throws detllm::Error (e.g. a deterministic
// request refused because the self-check failed).
RunResult run_bench(const LlamaModel& model, const engine::EngineConfig& config,
                    const Workload& workload, const RunSpec& spec,
                    const SamplingSettings& sampling = {}, const ProgressFn& progress = {});
inline RunResult run_offline(const LlamaModel& model, const engine::EngineConfig& config,
                             const Workload& workload, double det_share, uint64_t seed,
                             const SamplingSettings& sampling = {},
                             const ProgressFn& progress = {}) {
  return run_bench(model, config, workload, {0.0, det_share, seed}, sampling, progress);
}
inline RunResult run_online(const LlamaModel& model, const engine::EngineConfig& config,
                            const Workload& workload, double rate, double det_share, uint64_t seed,
                            const SamplingSettings& sampling = {},
                            const ProgressFn& progress = {}) {
  return run_bench(model, config, workload, {rate, det_share, seed}, sampling, progress);
}

// KV pool size when none is given: room for every request at once (whole blocks), capped at
// max_bytes of fp32 K and V (model/kv_storage.h) and at least the longest request.
int32_t default_kv_cache_tokens(const Workload& workload, const ModelConfig& model,
                                int32_t block_size, int64_t max_bytes);

}  // namespace detllm::bench
