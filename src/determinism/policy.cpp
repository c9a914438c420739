// DeterminismPolicy parsing, validation and description.
#include "determinism/policy.h"

#include <fmt/format.h>

#include "core/error.h"

namespace detllm {

std::string_view numerics_mode_name(NumericsMode mode) {
  switch (mode) {
    case NumericsMode::kInvariant: return "invariant";
    case NumericsMode::kFast: return "fast";
  }
  return "?";
}

NumericsMode parse_numerics_mode(std::string_view name) {
  if (name == "invariant") return NumericsMode::kInvariant;
  if (name == "fast") return NumericsMode::kFast;
  throw_error("unknown numerics mode '{}' (valid: invariant, fast)", name);
}

void DeterminismPolicy::validate() const {
  check(deterministic_mode != NumericsMode::kFast,
        "the fast numerics path cannot serve deterministic requests: it is not batch-invariant "
        "(choose --deterministic-mode invariant)");
}

std::string DeterminismPolicy::describe() const {
  return fmt::format("det={};other={};default={};self_check={}",
                     numerics_mode_name(deterministic_mode), numerics_mode_name(default_mode),
                     deterministic_by_default ? "det" : "nondet", self_check ? "on" : "off");
}

}  // namespace detllm
