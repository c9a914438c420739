// The mode table (modes.h): backend numerics and execution constraints of each mode.
#include "determinism/modes.h"

#include <array>

#include "core/error.h"

namespace detllm {
namespace {

const std::array<ModeInfo, 5> kModes = {{
    {DeterminismMode::kFast,
     {NumericsMode::kFast, false, false},
     false,
     false,
     true,
     "library heuristics (default cuBLAS), no constraint",
     "none; the speed reference"},
    {DeterminismMode::kInvariant,
     {NumericsMode::kInvariant, true, false},
     false,
     false,
     true,
     "batch-invariant kernels by construction (design.md Rules 1-2)",
     "V1-V11"},
    {DeterminismMode::kBiNaive,
     {NumericsMode::kInvariant, false, true},
     false,
     false,
     true,
     "one fixed GEMM tile config (128x128) for every shape, no split-K, fixed attention split",
     "V1-V11; slow"},
    {DeterminismMode::kPadded,
     {NumericsMode::kFast, false, false},
     true,
     true,
     true,
     "CoRun: deterministic requests' prefills isolated and whole (no prefix-cache hit), their "
     "decode steps at one padded shape with CUDA graphs, library kernels",
     "V1, V2, V8, V10; not V3-V5",
     true},
    {DeterminismMode::kVerified,
     {NumericsMode::kInvariant, true, false},
     false,
     false,
     true,
     "LLM-42: deterministic requests decode fast, windows verified on the invariant path in "
     "groups, rollback at the first mismatch; others fast",
     "as its verifier (invariant): V1-V11 for deterministic requests"},
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
  // no deterministic row (Ops::set_gemm_numerics; docs/modes.md, "Mixed traffic").
  base.default_mode = NumericsMode::kFast;
  base.self_check = base.self_check && info.backend.numerics == NumericsMode::kInvariant;
  return base;
}

void apply_mode(DeterminismMode mode, engine::EngineConfig& config) {
  const ModeInfo& info = mode_info(mode);
  config.policy = policy_for_mode(mode, config.policy);
  config.policy.validate();
  // isolate_prefill and prefix_cache_off apply per request (the engine marks deterministic
  // requests of such a mode SequenceOptions::isolated); the others run unconstrained.
  if (info.fixed_decode_shape) {
    config.decode_fixed_rows = config.scheduler.max_seqs;
    config.cuda_graphs = GraphMode::kOn;
  } else {
    config.decode_fixed_rows = 0;
  }
}

std::string_view fingerprint_mode_name(const DeterminismPolicy& policy, bool deterministic) {
  if (policy.mode == DeterminismMode::kInvariant || policy.mode == DeterminismMode::kFast) {
    return numerics_mode_name(policy.mode_for(deterministic));
  }
  return determinism_mode_name(policy.mode);
}

}  // namespace detllm
