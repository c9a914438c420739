// The five determinism modes (design.md section 3) and what each one means, in ONE place:
// (a) the backend numerics it runs — CPU: the CPU kernels in every mode (invariant by
// construction); CUDA: CudaOptions fields — and (b) the engine's execution constraints
// (scheduler, decode padding, graphs). CLI, benchmarks and the guarantee matrix all map a
// mode through here. The guarantee each mode is expected to keep is design.md's; the matrix
// (guarantee_matrix.h) measures what it actually keeps.
//
//   mode       numerics of det. rows  GEMM (CUDA)                      execution constraints
//   fast       fast (library)         default cuBLAS                   none
//   invariant  invariant              ours / verified cuBLASLt plans   none
//   bi-naive   invariant              ours, ONE tile (128×128), S = 1   none
//   padded     fast (library)         default cuBLAS                   deterministic requests:
//                                                                      isolated whole prefill,
//                                                                      no prefix-cache hit;
//                                                                      their decode steps at
//                                                                      ONE shape (max_seqs
//                                                                      rows), CUDA graphs
//   verified   invariant + fast       ours / verified plans, and       none (prefix cache on,
//              per step               default cuBLAS in fast steps     graphs keyed per
//                                     (StepBatch::numerics)            numerics); engine:
//                                                                      candidates, windows,
//                                                                      groups, rollback
//
// Mixed traffic, every mode: requests that are not deterministic run on the fast numerics and
// unconstrained in steps that hold no deterministic row; a step with a deterministic row runs
// as that row needs (one step, one set of GEMMs). The backend is built with the mode's
// numerics; each step's GEMMs get the step's (StepPlan::numerics -> StepBatch::numerics ->
// every Ops::matmul call).
#pragma once

#include <span>
#include <string_view>

#include "determinism/policy.h"

namespace detllm {

// apply_mode (engine/engine_config.h) turns a mode into engine settings; this header holds the
// table only and includes nothing above core/ (docs/architecture.md, "Layers").

// Backend numerics of a mode, independent of any backend header: cli/backend.cpp and the
// benchmarks copy it into kernels::CudaOptions (mode, gemm_lt, gemm_fixed_tile). The CPU
// backend ignores it.
struct BackendNumerics {
  NumericsMode numerics = NumericsMode::kInvariant;
  bool gemm_lt = true;           // CudaOptions::gemm_lt: verified cuBLASLt plans allowed
  bool gemm_fixed_tile = false;  // CudaOptions::gemm_fixed_tile: one tile config, no split-K
  // CudaOptions::kv_dtype (auto = bf16 on CUDA); the CPU stores fp32 KV only (bf16 refused).
  // Not a mode's choice: the CLI's --kv-dtype sets it (cli/backend.cpp), the same in every mode.
  KvDType kv_dtype = KvDType::kAuto;
  // The row-parallel layers (o_proj, down_proj) in the model's canonical chunks, summed in the
  // canonical tree (model/tensor_parallel.h; docs/tensor_parallel.md): the numerics of tensor
  // parallelism, the same at every degree, so it enters the fingerprint (the chunk counts, by
  // the backend's build string) and the degree does not. The CLI's --tensor-parallel N sets
  // it for every N, 1 included; not a mode's choice. The CPU backend only.
  bool tp_canonical = false;
  // The CPU backend's activation rounding (policy.h); CUDA has only kF32 (q8 refused). Not a
  // mode's choice either: the CLI's --activations sets it.
  CpuActivations cpu_activations = CpuActivations::kF32;
};

struct ModeInfo {
  DeterminismMode mode;
  BackendNumerics backend;
  // Deterministic requests are isolated sequences (SequenceOptions::isolated): each prefill
  // alone and whole, decode rows only in decode-only steps, no prefix-cache hit.
  bool isolate_prefill = false;
  bool fixed_decode_shape = false;  // steps with deterministic decode rows padded to max_seqs
  std::string_view what;      // one line: the strategy
  std::string_view expected;  // design.md's expected guarantee
  // The peers' way (CoRun): deterministic requests never use the prefix cache (their
  // isolation skips it); the others still do.
  bool prefix_cache_off = false;
};

// Every mode, in kAllDeterminismModes order; mode_info(m) is one of them.
std::span<const ModeInfo> all_mode_infos();
const ModeInfo& mode_info(DeterminismMode mode);

// A consistent policy for `mode`: mode set, both numerics paths = the mode's, the startup
// self-check only where the mode claims invariant kernels (invariant, bi-naive). `base`
// supplies the rest (deterministic_by_default).
DeterminismPolicy policy_for_mode(DeterminismMode mode, DeterminismPolicy base = {});

// The numerics name a fingerprint records for requests of `policy` (deterministic or not):
// the numerics path for fast/invariant, the mode's name for the others ("bi-naive", "padded"),
// so every mode has a fingerprint of its own and the default one is unchanged.
std::string_view fingerprint_mode_name(const DeterminismPolicy& policy, bool deterministic);

}  // namespace detllm
