// The backend a CLI command runs on (`--backend cpu|cuda`) and the determinism mode
// (`--mode fast|invariant|bi-naive|padded|verified`, determinism/modes.h; or the older
// `--numerics invariant|fast`), stored in the one DeterminismPolicy, never a loose flag. The
// factory behind them is backends/backends.h (below cli/, shared with api/).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "backends/backends.h"

namespace detllm::cli {

using backends::Backend;
using backends::BackendOptions;
using backends::cuda_backend_built;
using backends::install_backend;
using backends::make_backend;
using backends::selected_mode;

// Registers --backend, --numerics, --mode (excludes --numerics) and --device on a subcommand;
// numerics_help says what the numerics path means for that command.
void add_backend_options(CLI::App& cmd, BackendOptions& o, const std::string& numerics_help);
// Registers --kv-dtype, --activations and --quantization: the numerics classes beside the mode
// (add_backend_options does too; bench registers them alone).
void add_numerics_class_options(CLI::App& cmd, BackendOptions& o);
// Registers --tensor-parallel N (serve, generate, score, bench; docs/tensor_parallel.md).
void add_tensor_parallel_option(CLI::App& cmd, BackendOptions& o);
// Registers --gemm-plan-cache PATH and --no-gemm-plan-cache (add_backend_options does too).
void add_gemm_plan_cache_options(CLI::App& cmd, BackendOptions& o);

}  // namespace detllm::cli
