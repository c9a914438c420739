// DeterminismPolicy parsing, validation and description.
#include "determinism/policy.h"

#include <fmt/format.h>

#include "core/error.h"

namespace detllm {

std::string_view numerics_mode_name(NumericsMode mode) {
  switch (mode) {
    case NumericsMode::kInvariant:
      return "invariant";
    case NumericsMode::kFast:
      return "fast";
  }
  return "?";
}

NumericsMode parse_numerics_mode(std::string_view name) {
  if (name == "invariant") return NumericsMode::kInvariant;
  if (name == "fast") return NumericsMode::kFast;
  throw_error("unknown numerics mode '{}' (valid: invariant, fast)", name);
}

std::string_view kv_dtype_name(KvDType dtype) {
  switch (dtype) {
    case KvDType::kAuto:
      return "auto";
    case KvDType::kBF16:
      return "bf16";
    case KvDType::kF32:
      return "fp32";
    case KvDType::kFP8:
      return "fp8";
  }
  return "?";
}

KvDType parse_kv_dtype(std::string_view name) {
  for (KvDType d : {KvDType::kAuto, KvDType::kBF16, KvDType::kF32, KvDType::kFP8})
    if (name == kv_dtype_name(d)) return d;
  throw_error("unknown KV dtype '{}' (valid: auto, bf16, fp32, fp8)", name);
}

std::string_view cpu_activations_name(CpuActivations act) {
  switch (act) {
    case CpuActivations::kF32:
      return "f32";
    case CpuActivations::kQ8:
      return "q8";
  }
  return "?";
}

CpuActivations parse_cpu_activations(std::string_view name) {
  for (CpuActivations a : {CpuActivations::kF32, CpuActivations::kQ8})
    if (name == cpu_activations_name(a)) return a;
  throw_error("unknown activation rounding '{}' (valid: f32, q8)", name);
}

std::string_view determinism_mode_name(DeterminismMode mode) {
  switch (mode) {
    case DeterminismMode::kInvariant:
      return "invariant";
    case DeterminismMode::kFast:
      return "fast";
    case DeterminismMode::kBiNaive:
      return "bi-naive";
    case DeterminismMode::kPadded:
      return "padded";
    case DeterminismMode::kVerified:
      return "verified";
  }
  return "?";
}

DeterminismMode parse_determinism_mode(std::string_view name) {
  for (DeterminismMode m : kAllDeterminismModes)
    if (name == determinism_mode_name(m)) return m;
  throw_error("unknown determinism mode '{}' (valid: fast, invariant, bi-naive, padded, verified)",
              name);
}

void DeterminismPolicy::validate() const {
  // fast and padded run library kernels for every request: their "deterministic" requests get
  // only what the mode gives (the guarantee matrix measures it), so they are chosen explicitly.
  const bool library_kernels = mode == DeterminismMode::kFast || mode == DeterminismMode::kPadded;
  check(library_kernels || deterministic_mode != NumericsMode::kFast,
        "the fast numerics path cannot serve deterministic requests: it is not batch-invariant "
        "(choose --deterministic-mode invariant)");
  check(!library_kernels || deterministic_mode == NumericsMode::kFast,
        "determinism mode '{}' runs the fast (library) numerics for every request, not '{}'",
        determinism_mode_name(mode), numerics_mode_name(deterministic_mode));
  // verified: deterministic requests are verified on the invariant numerics (their fast
  // candidates never reach the caller); the others run fast.
  check(mode != DeterminismMode::kVerified ||
            (deterministic_mode == NumericsMode::kInvariant && default_mode == NumericsMode::kFast),
        "determinism mode 'verified' verifies deterministic requests on the invariant numerics "
        "and serves the others on the fast one (det=invariant, other=fast)");
}

std::string DeterminismPolicy::describe() const {
  return fmt::format("det={};other={};default={};self_check={};mode={}",
                     numerics_mode_name(deterministic_mode), numerics_mode_name(default_mode),
                     deterministic_by_default ? "det" : "nondet", self_check ? "on" : "off",
                     determinism_mode_name(mode));
}

}  // namespace detllm
