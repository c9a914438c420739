// `detllm serve --data-parallel-size N` (vLLM's name): N replicas on Ray behind one router.
// The replicas and the router are detllm.ray's (python/detllm/ray, docs/ray.md); this only
// turns the serve command line into `python -m detllm.ray serve` and replaces the process.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace detllm::cli {

struct DataParallelOptions {
  int size = 1;                  // --data-parallel-size
  std::string ray_address;       // --ray-address: a running cluster ("auto"); else a local one
  double cpus_per_replica = 1;   // --num-cpus-per-replica
  double gpus_per_replica = 0;   // --num-gpus-per-replica
};

// Registers the options above on `detllm serve`.
void add_data_parallel_options(CLI::App& cmd, DataParallelOptions& o);

// Remembers the process's arguments (main calls it before parsing): the replicas get every
// serve option except the router's own (host, port, api key) and the data-parallel ones.
void set_raw_arguments(int argc, char** argv);

// The `python -m detllm.ray serve` command line for these options (argv[0] is the
// interpreter). Exposed for the tests; run_data_parallel executes it.
std::vector<std::string> data_parallel_command(const DataParallelOptions& o,
                                               const std::vector<std::string>& serve_args,
                                               const std::string& self_binary,
                                               const std::string& python);

// Replaces this process with the router and its replicas; returns only on failure (an Error
// naming what to install).
[[noreturn]] void run_data_parallel(const DataParallelOptions& o);

}  // namespace detllm::cli
