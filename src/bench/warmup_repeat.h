// detllm bench's untimed warm-up and repeated runs.
//
// Warm-up: before a mode's measured runs, the first min(n, max_seqs) requests of the workload,
// outputs capped at kWarmupOutputTokens, run once per GEMM numerics the mode's steps use: at 0%
// deterministic (the fast numerics) and, unless the mode is `fast`, at 100% (the mode's). It
// reaches the largest decode batches and the workload's prompt lengths, so first-use costs —
// CUDA graph captures per (row bucket, table width, numerics), cuBLAS heuristics, scratch
// growth — fall mostly there, not into one mode's measured run rather than another's.
//
// Repeats (--repeat N): an offline run made N times in a row; the report keeps the run of
// median duration and every run's duration, so a ratio comes with the spread behind it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/driver.h"
#include "bench/workload.h"
#include "determinism/policy.h"

namespace detllm::bench {

inline constexpr int32_t kWarmupOutputTokens = 16;

// The warm-up requests: the first min(size, max_seqs) of `workload`, outputs capped.
Workload warmup_workload(const Workload& workload, int32_t max_seqs);
// The deterministic shares (percent) to warm up at under `mode`: {0} for fast, else {0, 100}.
std::vector<double> warmup_shares(DeterminismMode mode);
// One line for the report's conditions (n_requests: the warm-up workload's size).
std::string warmup_description(int32_t n_requests);

// The run of median duration (the lower middle for an even count), with every run's duration
// in run order in repeat_durations_s (left empty for a single run). Throws detllm::Error on an
// empty list.
RunResult median_run(std::vector<RunResult> runs);

}  // namespace detllm::bench
