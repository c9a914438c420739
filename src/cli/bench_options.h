// The options of `detllm bench` (bench_cmd.cpp runs them): what the command line sets, and the
// CLI11 registration of each group of flags. The defaults are the command's.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/mode_runs.h"
#include "bench/workload.h"
#include "cli/backend.h"
#include "engine/engine_config.h"

namespace detllm::cli {

struct BenchOptions {
  std::string model;  // "" = the embedded default; "synthetic:NAME"; a GGUF / HF path
  BackendOptions backend;
  std::string mode;                // --mode
  std::vector<std::string> modes;  // --modes a,b,c
  std::string workload = "sharegpt";
  std::string dataset;        // sharegpt; "" = found in .venv
  std::string tokenizer;      // sharegpt with a synthetic model: counts the lengths
  std::string requests;       // file: the request file to run
  std::string save_requests;  // write the workload here
  bool save_only = false;     // ... and stop: no backend, no model weights, no run
  bench::WorkloadOptions w;
  bool n_given = false;  // --n on the command line (file: the first n requests; else all)
  bench::VerifyOptions verify;
  // --speculative-method, --num-speculative-tokens, --speculative-config, ... (serve's flags,
  // speculative_flags.h): every mode's engine drafts so.
  engine::SpeculativeConfig speculative;
  std::vector<double> det_shares = {100};
  std::vector<double> rates;
  bool offline = true;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int max_tokens_per_step = 0;  // 0 = EngineConfig's default
  int max_seqs = 0;             // 0 = the backend's (engine::default_max_seqs)
  int chunk_size = -1;          // -1 = EngineConfig's default
  // 0 = room for every request: on cuda at most gpu_memory_fraction of the device memory free
  // after the weights and plans, on cpu at most 4 GiB of fp32 K and V (mode_engine_config)
  int kv_cache_tokens = 0;
  double gpu_memory_fraction = 0.9;
  bool prefix_cache = true;
  bool self_check = true;
  bool warmup = true;  // untimed runs of the first requests per mode (bench/warmup_repeat.h)
  bool graph_warmup = true;  // each run's decode graphs captured before its clock starts
  int repeat = 1;      // offline runs made this many times; the median one is reported
  float temperature = 0.0f;
  float top_p = 1.0f;
  std::string json_out;
  std::string step_trace;  // CSV of every step of every run (--step-trace)
};

// Registers every option of `detllm bench` on cmd, in the order --help lists them, writing into
// *o (the flags that clear a field capture o). Returns the --n option (its count tells whether
// --n was given).
CLI::Option* add_bench_options(CLI::App& cmd, const std::shared_ptr<BenchOptions>& o);

}  // namespace detllm::cli
