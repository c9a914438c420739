// The warm-up workload and the median of repeated runs (see warmup_repeat.h).
#include "bench/warmup_repeat.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace detllm::bench {

Workload warmup_workload(const Workload& workload, int32_t max_seqs) {
  Workload w = workload;
  w.requests.resize(std::min(w.requests.size(), static_cast<size_t>(std::max(1, max_seqs))));
  for (BenchRequest& r : w.requests) r.output_len = std::min(r.output_len, kWarmupOutputTokens);
  return w;
}

std::vector<double> warmup_shares(DeterminismMode mode) {
  if (mode == DeterminismMode::kFast) return {0.0};
  return {0.0, 100.0};
}

std::string warmup_description(int32_t n_requests) {
  return fmt::format(
      "untimed warm-up per mode: the first {} requests, outputs capped at {} tokens, at 0% and "
      "(except fast) 100% deterministic",
      n_requests, kWarmupOutputTokens);
}

RunResult median_run(std::vector<RunResult> runs) {
  check(!runs.empty(), "median_run: no runs");
  std::vector<double> durations;
  for (const RunResult& r : runs) durations.push_back(r.duration_s);
  std::vector<size_t> order(runs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return durations[a] < durations[b]; });
  RunResult median = std::move(runs[order[(order.size() - 1) / 2]]);
  if (durations.size() > 1) median.repeat_durations_s = std::move(durations);
  return median;
}

}  // namespace detllm::bench
