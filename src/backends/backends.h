// The backend factory: the backend a command or the Python facade runs on (cpu | cuda) with a
// determinism mode's numerics. The only place that knows whether this build has the CUDA
// backend: builds without it (no nvcc, or -DDETLLM_CUDA=OFF) refuse `cuda` with what to do.
// Below cli/ and api/ (docs/architecture.md, "Layers"); cli/backend.h adds the command-line
// options. Compiled into the CLI and the Python extension, which link detllm_cuda when it
// exists (DETLLM_HAVE_CUDA), not into libdetllm.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "determinism/fingerprint.h"
#include "determinism/modes.h"
#include "determinism/policy.h"
#include "kernels/ops.h"
#include "model/bundle.h"

namespace detllm::backends {

// What to run on (the CLI's --backend, --numerics, --mode, --device, --kv-dtype).
struct BackendOptions {
  std::string backend = "cpu";         // --backend: cpu | cuda
  std::string numerics = "invariant";  // --numerics: invariant | fast
  std::string mode;                    // --mode: one of the five modes; "" = not given
  int device = 0;                      // --device: CUDA device ordinal
  std::string kv_dtype = "auto";       // --kv-dtype: auto | bf16 | fp32 | fp8 (BackendNumerics)
  std::string activations = "f32";     // --activations: f32 | q8 (BackendNumerics, cpu only)
  // --quantization: "" (the weights as the checkpoint stores them; an FP8 checkpoint says so in
  // its quantization_config) or fp8 (model/fp8_weights.h: per-channel FP8 made at load).
  std::string quantization;
  // --gemm-plan-cache PATH / --no-gemm-plan-cache: where CUDA's verified GEMM plans persist
  // (CudaOptions::gemm_plan_cache; "" = the default location). Not numerics: a persisted
  // plan is re-verified bit for bit before use. Ignored by the CPU backend.
  std::string gemm_plan_cache;
  bool no_gemm_plan_cache = false;
  // --tensor-parallel N (docs/tensor_parallel.md): 0 = not given, the one-device model; N >= 1
  // = the canonical chunks (BackendNumerics::tp_canonical) over N ranks, threads of this
  // process each with its own CPU ops (the thread count is the total: each rank gets
  // max(1, threads / N)). The same bits and fingerprint at every N; 1 differs from 0.
  int tensor_parallel = 0;
};

// True when this binary was built with the CUDA backend.
bool cuda_backend_built();

struct Backend {
  std::unique_ptr<kernels::Ops> ops;
  std::string fingerprint_name;  // FingerprintInputs::backend: "cpu" or "cuda:<device>"
  std::string build;             // FingerprintInputs::backend_build: the SIMD arch (plus
                                 // ";act=q8" in the q8-activation class), or
                                 // "sm_90a;kv=bf16|fp32" (the KV dtype is numerics)
  std::string description;       // one line for logs and the server's info endpoint
  // --tensor-parallel N (N >= 1): ops is null and install_backend makes a TpGroup of N ranks,
  // each on make_rank_ops(); it appends the canonical chunk counts to build and description.
  int tensor_parallel = 0;
  std::function<std::unique_ptr<kernels::Ops>()> make_rank_ops;
  // The CPU activation class it was made with (install_backend refuses kQ8 on a model with no
  // matrix it applies to: the fingerprint would claim a rounding that never happens).
  CpuActivations cpu_activations = CpuActivations::kF32;
  // --quantization (BackendOptions): install_backend quantizes the weights to FP8 when "fp8",
  // and appends the FP8 class (model/fp8_weights.h fp8_class_name) to build for FP8 weights.
  std::string quantization;
  // --kv-dtype as given (kAuto when not chosen): install_backend refuses a checkpoint with FP8
  // KV scales under kAuto rather than run it without them unasked.
  KvDType kv_dtype = KvDType::kAuto;
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

// What the backend's GEMM planning did so far, in one line for the startup progress ("" for
// a backend without plans): e.g. "60 GEMM plans: 48 from FILE (40 cuBLASLt re-verified bit
// for bit, 8 kernel), 12 tuned, 0 rejected; file written 12 times". Warnings were printed
// when they happened.
std::string gemm_plan_summary(const kernels::Ops& ops);

// The numerics fingerprint (determinism/fingerprint.h) of requests run on `backend` — after
// install_backend, whose tensor parallelism it includes — with these weights and policy.
std::string backend_fingerprint(const Backend& backend, uint64_t weights_hash,
                                const DeterminismPolicy& policy, bool deterministic);
// ... and what it hashes (fingerprint_fields names them, GET /v1/models publishes them).
FingerprintInputs backend_fingerprint_inputs(const Backend& backend, uint64_t weights_hash,
                                             const DeterminismPolicy& policy,
                                             bool deterministic);

// Throws, saying what to do, when `backend` runs --activations q8 and `weights` hold no
// Q4_0/Q4_1/Q8_0 matrix: the fingerprint would name a rounding that never happens.
void check_activations_apply(const Backend& backend, const ModelWeights& weights);

// Moves `backend`'s ops into the bundle and rebuilds its LlamaModel on them (weights uploaded
// to a device backend). open_model_bundle builds on the CPU; this swaps before first use.
// With backend.tensor_parallel N >= 1 it builds the bundle's TpGroup instead (bundle.tp; the
// engine runs bundle.engine_model(), its leader) and appends the model's canonical chunk
// counts to backend.build (the fingerprint) and backend.description; throws detllm::Error,
// naming the degrees the model allows, for one it does not. Calls check_activations_apply first.
void install_backend(ModelBundle& bundle, Backend& backend);

}  // namespace detllm::backends
