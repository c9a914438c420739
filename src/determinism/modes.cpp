// The mode table (modes.h): backend numerics and execution constraints of each mode.
#include "determinism/modes.h"

#include <array>

#include "core/error.h"

namespace detllm {
namespace {

const std::array<ModeInfo, 5> kModes = {{
    {.mode = DeterminismMode::kFast,
     .backend = {.numerics = NumericsMode::kFast, .gemm_lt = false, .gemm_fixed_tile = false},
     .what = "library heuristics (default cuBLAS), no constraint",
     .expected = "none; the speed reference"},
    {.mode = DeterminismMode::kInvariant,
     .backend = {.numerics = NumericsMode::kInvariant, .gemm_lt = true, .gemm_fixed_tile = false},
     .what = "batch-invariant kernels by construction (design.md Rules 1-2)",
     .expected = "V1-V11"},
    {.mode = DeterminismMode::kBiNaive,
     .backend = {.numerics = NumericsMode::kInvariant, .gemm_lt = false, .gemm_fixed_tile = true},
     .what = "one fixed GEMM tile config (128x128) for every shape, no split-K, fixed attention "
             "split",
     .expected = "V1-V11; slow"},
    {.mode = DeterminismMode::kPadded,
     .backend = {.numerics = NumericsMode::kFast, .gemm_lt = false, .gemm_fixed_tile = false},
     .isolate_prefill = true,
     .fixed_decode_shape = true,
     .what = "CoRun: deterministic requests' prefills isolated and whole (no prefix-cache hit), "
             "their decode steps at one padded shape with CUDA graphs, library kernels",
     .expected = "V1, V2, V8, V10; not V3-V5",
     .prefix_cache_off = true},
    {.mode = DeterminismMode::kVerified,
     .backend = {.numerics = NumericsMode::kInvariant, .gemm_lt = true, .gemm_fixed_tile = false},
     .what = "LLM-42: deterministic requests decode fast, windows verified on the invariant path "
             "in groups, rollback at the first mismatch; others fast",
     .expected = "as its verifier (invariant): V1-V11 for deterministic requests"},
}};

}  // namespace

std::span<const ModeInfo> all_mode_infos() {
  return kModes;
}

const ModeInfo& mode_info(DeterminismMode mode) {
  for (const ModeInfo& m : kModes)
    if (m.mode == mode) return m;
  throw_error("unknown determinism mode {}", static_cast<int>(mode));
}

DeterminismPolicy policy_for_mode(DeterminismMode mode, DeterminismPolicy base) {
  const ModeInfo& info = mode_info(mode);
  base.mode = mode;
  base.deterministic_mode = info.backend.numerics;
  // Requests that are not deterministic are served on the fast numerics in every mode: the
  // backend is built with the mode's numerics and switched to fast for each step that holds
  // no deterministic row (StepBatch::numerics; docs/modes.md, "Mixed traffic").
  base.default_mode = NumericsMode::kFast;
  base.self_check = base.self_check && info.backend.numerics == NumericsMode::kInvariant;
  return base;
}

std::string_view fingerprint_mode_name(const DeterminismPolicy& policy, bool deterministic) {
  if (policy.mode == DeterminismMode::kInvariant || policy.mode == DeterminismMode::kFast) {
    return numerics_mode_name(policy.mode_for(deterministic));
  }
  return determinism_mode_name(policy.mode);
}

}  // namespace detllm
