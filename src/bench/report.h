// detllm bench results: the conditions they were measured under and the runs of every mode,
// as JSON (--json FILE; scripts/plot_bench.py draws it) and as markdown tables (stdout). Each
// JSON result carries its full conditions (backend and device, model, workload, mode's policy,
// engine settings, git commit), so results of several files can be merged and compared.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "bench/driver.h"
#include "engine/engine_config.h"

namespace detllm::bench {

// How the deterministic share acts (printed and stored with every report).
inline constexpr const char* kMixedTrafficNote =
    "mixed traffic: deterministic requests run under the mode, the others on the fast numerics "
    "and unconstrained in every step that holds no deterministic row, so a step with one "
    "deterministic row runs as that row needs (one step, one set of GEMMs; docs/modes.md, "
    "Mixed traffic)";

// The engine settings a result depends on, from a resolved EngineConfig ("verify" only under
// the verified mode).
nlohmann::json engine_config_json(const engine::EngineConfig& config);
nlohmann::json verify_config_json(const engine::VerifyConfig& verify);

struct ModeReport {
  std::string mode;              // the run's label (bench/mode_runs.h): "fast", "verified(g=128)"
  std::string determinism_mode;  // determinism_mode_name; "" = mode
  std::optional<engine::VerifyConfig> verify;  // the verified mode's settings
  std::string policy;                          // DeterminismPolicy::describe()
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
  bool warmup = false;             // an untimed warm-up run per mode before the measured ones
  std::string warmup_description;  // what the warm-up ran (bench/warmup_repeat.h)
  int32_t repeat = 1;              // --repeat: offline runs made this many times, median kept
  std::string caveat = kMixedTrafficNote;
  std::vector<ModeReport> modes;  // in --modes order
};

// The commit of the source tree: $DETLLM_GIT_COMMIT when set (a copy of the tree without its
// history: scripts/gpu/prebuild.sh records the commit), else `git rev-parse` in the current
// directory, then beside the executable, "-dirty" appended when files differ; "unknown" when
// git or the repository is not there (never throws).
std::string current_git_commit();
std::string utc_now_iso8601();

// {"conditions": {...}, "caveat", "results": [...]}: one result per (mode, run), each with
// "conditions" (the shared ones plus its mode's policy, backend, engine, self-check).
nlohmann::json report_json(const BenchReport& report);
// Conditions, an offline table (throughput per mode and share, ratios vs the first mode and
// vs fast), an online table (latency percentiles per mode, rate, share and request class).
std::string report_markdown(const BenchReport& report);

}  // namespace detllm::bench
