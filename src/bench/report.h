// detllm bench results: the conditions they were measured under and the runs of every mode,
// as JSON (--json FILE; scripts/plot_bench.py draws it) and as markdown tables (stdout). Each
// JSON result carries its full conditions (backend and device, model, workload, mode's policy,
// engine settings, git commit), so results of several files can be merged and compared.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "bench/driver.h"
#include "engine/engine_config.h"

namespace detllm::bench {

// What this version measures and what it does not (printed and stored with every report).
inline constexpr const char* kEngineWideModeCaveat =
    "modes apply engine-wide in this version: one engine in one mode serves every request, so "
    "under fast, invariant, bi-naive and padded the deterministic share changes only which "
    "requests are marked deterministic (the self-check gates them), not the kernels, batches "
    "or prefix-cache class they get (verified is the exception: it verifies the "
    "deterministic requests and runs the others fast); the mixed per-class execution of "
    "issue 6 (deterministic requests on the invariant path, the others on the fast one, in one "
    "engine, for every mode) is future work";

// The engine settings a result depends on, from a resolved EngineConfig.
nlohmann::json engine_config_json(const engine::EngineConfig& config);

struct ModeReport {
  std::string mode;             // determinism_mode_name
  std::string policy;           // DeterminismPolicy::describe()
  std::string backend;          // the backend's one-line description (device, numerics)
  std::string self_check;       // self_check_state_name (and the failure, if any)
  nlohmann::json engine;        // engine_config_json of the resolved config
  double setup_s = 0.0;         // backend + model (weights) + self-check
  std::vector<RunResult> runs;  // offline runs first (det_share order), then online
};

struct BenchReport {
  std::string version;            // engine_version()
  std::string git_commit;         // current_git_commit()
  std::string started_at;         // UTC, ISO 8601
  std::string backend;            // --backend
  std::string host;               // one line: CPU model and threads
  std::string model;              // --model as given
  std::string model_description;  // arch, layers, dim, vocab, weights source
  std::string workload;           // workload name
  std::string workload_description;
  int64_t n_requests = 0, prompt_tokens = 0, output_tokens = 0;
  std::string sampling;  // "greedy" or temperature/top-p/seed
  uint64_t seed = 0;
  bool warmup = false;  // an untimed warm-up run per mode before the measured ones
  std::string caveat = kEngineWideModeCaveat;
  std::vector<ModeReport> modes;  // in --modes order
};

// The commit of the source tree: `git rev-parse` in the current directory, then beside the
// executable, "-dirty" appended when files differ; "unknown" when git or the repository is not
// there (never throws).
std::string current_git_commit();
std::string utc_now_iso8601();

// {"conditions": {...}, "caveat", "results": [...]}: one result per (mode, run), each with
// "conditions" (the shared ones plus its mode's policy, backend, engine, self-check).
nlohmann::json report_json(const BenchReport& report);
// Conditions, an offline table (throughput per mode and share, ratios vs the first mode and
// vs fast), an online table (latency percentiles per mode, rate, share and request class).
std::string report_markdown(const BenchReport& report);

}  // namespace detllm::bench
