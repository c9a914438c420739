// The backend a CLI command runs on (`--backend cpu|cuda`) and the determinism mode
// (`--mode fast|invariant|bi-naive|padded|verified`, determinism/modes.h; or the older
// `--numerics invariant|fast`), stored in the one DeterminismPolicy, never a loose flag.
// The only place that knows whether this build has the CUDA backend: builds without it (no
// nvcc, or -DDETLLM_CUDA=OFF) refuse `--backend cuda` with what to do.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

#include "determinism/modes.h"
#include "determinism/policy.h"
#include "kernels/ops.h"
#include "model/bundle.h"

namespace detllm::cli {

struct BackendOptions {
  std::string backend = "cpu";         // --backend: cpu | cuda
  std::string numerics = "invariant";  // --numerics: invariant | fast
  std::string mode;                    // --mode: one of the five modes; "" = not given
  int device = 0;                      // --device: CUDA device ordinal
  std::string kv_dtype = "auto";       // --kv-dtype: auto | bf16 | fp32 (BackendNumerics)
};

// Registers --backend, --numerics, --mode (excludes --numerics) and --device on a subcommand;
// numerics_help says what the numerics path means for that command.
void add_backend_options(CLI::App& cmd, BackendOptions& o, const std::string& numerics_help);

// True when this binary was built with the CUDA backend.
bool cuda_backend_built();

struct Backend {
  std::unique_ptr<kernels::Ops> ops;
  std::string fingerprint_name;  // FingerprintInputs::backend: "cpu" or "cuda:<device>"
  std::string build;             // FingerprintInputs::backend_build: SIMD arch, or
                                 // "sm_90a;kv=bf16|fp32" (the KV dtype is numerics)
  std::string description;       // one line for logs and the server's info endpoint
};

// The --mode given, if any (parsed; throws detllm::Error for an unknown name).
std::optional<DeterminismMode> selected_mode(const BackendOptions& o);

// The backend `name` running numerics `mode` (the CPU runs its invariant kernels for every
// mode). Throws detllm::Error, with what to do, for an unknown name, a build without CUDA, or
// a machine without a usable GPU.
Backend make_backend(const BackendOptions& o, NumericsMode mode, int n_threads);
// The same for a mode's backend numerics (modes.h: CUDA gets its mode, gemm_lt and the fixed
// tile; the CPU runs its invariant kernels).
Backend make_backend(const BackendOptions& o, const BackendNumerics& numerics, int n_threads);

// Moves `backend`'s ops into the bundle and rebuilds its LlamaModel on them (weights uploaded
// to a device backend). open_model_bundle builds on the CPU; this swaps before first use.
void install_backend(ModelBundle& bundle, Backend& backend);

}  // namespace detllm::cli
