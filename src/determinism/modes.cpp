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
     "CoRun: isolated whole-prompt prefill, decode at one padded shape with CUDA graphs, "
     "library kernels, prefix cache off",
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
  // verified: the backend is built invariant and switched to fast per step; requests that
  // are not deterministic are served on the fast numerics.
  base.default_mode =
      mode == DeterminismMode::kVerified ? NumericsMode::kFast : info.backend.numerics;
  base.self_check = base.self_check && info.backend.numerics == NumericsMode::kInvariant;
  return base;
}

void apply_mode(DeterminismMode mode, engine::EngineConfig& config) {
  const ModeInfo& info = mode_info(mode);
  config.policy = policy_for_mode(mode, config.policy);
  config.policy.validate();
  config.scheduler.isolate_prefill = info.isolate_prefill;
  if (info.fixed_decode_shape) {
    config.decode_fixed_rows = config.scheduler.max_seqs;
    config.cuda_graphs = GraphMode::kOn;
  } else {
    config.decode_fixed_rows = 0;
  }
  // A cache hit would shorten the prefill, and library GEMMs change bits with M.
  if (info.prefix_cache_off) config.scheduler.kv.enable_prefix_cache = false;
}

std::string_view fingerprint_mode_name(const DeterminismPolicy& policy, bool deterministic) {
  if (policy.mode == DeterminismMode::kInvariant || policy.mode == DeterminismMode::kFast) {
    return numerics_mode_name(policy.mode_for(deterministic));
  }
  return determinism_mode_name(policy.mode);
}

}  // namespace detllm
