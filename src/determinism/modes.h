// The five determinism modes (design.md section 3) and what each one means, in ONE place:
// (a) the backend numerics it runs — CPU: the CPU kernels in every mode (invariant by
// construction); CUDA: CudaOptions fields — and (b) the engine's execution constraints
// (scheduler, decode padding, graphs). CLI, benchmarks and the guarantee matrix all map a
// mode through here. The guarantee each mode is expected to keep is design.md's; the matrix
// (guarantee_matrix.h) measures what it actually keeps.
//
//   mode       numerics               GEMM (CUDA)                      execution constraints
//   fast       fast (library)         default cuBLAS                   none
//   invariant  invariant              ours / verified cuBLASLt plans   none
//   bi-naive   invariant              ours, ONE tile (128×128), S = 1   none
//   padded     fast (library)         default cuBLAS                   isolated whole prefill;
//                                                                      decode padded to ONE
//                                                                      shape (max_seqs rows),
//                                                                      CUDA graphs
//   verified   invariant + fast       ours / verified plans, and       none (prefix cache on,
//              per step               default cuBLAS in fast steps     graphs keyed per
//                                     (Ops::set_gemm_numerics)         numerics); engine:
//                                                                      candidates, windows,
//                                                                      groups, rollback
#pragma once

#include <span>
#include <string_view>

#include "determinism/policy.h"
#include "engine/engine_config.h"

namespace detllm {

// Backend numerics of a mode, independent of any backend header: cli/backend.cpp and the
// benchmarks copy it into kernels::CudaOptions (mode, gemm_lt, gemm_fixed_tile). The CPU
// backend ignores it.
struct BackendNumerics {
  NumericsMode numerics = NumericsMode::kInvariant;
  bool gemm_lt = true;           // CudaOptions::gemm_lt: verified cuBLASLt plans allowed
  bool gemm_fixed_tile = false;  // CudaOptions::gemm_fixed_tile: one tile config, no split-K
};

struct ModeInfo {
  DeterminismMode mode;
  BackendNumerics backend;
  bool isolate_prefill = false;     // SchedulerConfig::isolate_prefill
  bool fixed_decode_shape = false;  // decode padded to max_seqs rows, graphs on
  bool implemented = true;
  std::string_view what;          // one line: the strategy
  std::string_view expected;      // design.md's expected guarantee
  bool prefix_cache_off = false;  // the peers' way: no prefix cache (CoRun)
};

// Every mode, in kAllDeterminismModes order; mode_info(m) is one of them.
std::span<const ModeInfo> all_mode_infos();
const ModeInfo& mode_info(DeterminismMode mode);

// A consistent policy for `mode`: mode set, both numerics paths = the mode's, the startup
// self-check only where the mode claims invariant kernels (invariant, bi-naive). `base`
// supplies the rest (deterministic_by_default).
DeterminismPolicy policy_for_mode(DeterminismMode mode, DeterminismPolicy base = {});

// Applies `mode` to an engine configuration: the policy (policy_for_mode of its current one)
// and the execution constraints — padded: scheduler.isolate_prefill, decode padded to exactly
// scheduler.max_seqs rows (decode_fixed_rows) with cuda_graphs = on. Other settings are kept.
// verified needs no constraint here (the engine runs it: EngineConfig::verify).
void apply_mode(DeterminismMode mode, engine::EngineConfig& config);

// The numerics name a fingerprint records for requests of `policy` (deterministic or not):
// the numerics path for fast/invariant, the mode's name for the others ("bi-naive", "padded"),
// so every mode has a fingerprint of its own and the default one is unchanged.
std::string_view fingerprint_mode_name(const DeterminismPolicy& policy, bool deterministic);

}  // namespace detllm
