// DeterminismPolicy: the one object that carries every determinism setting (never loose
// flags). It says which numerics path serves deterministic and non-deterministic requests and
// whether the startup self-check gates deterministic requests. Passed by const& everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace detllm {

// Numerics paths (design.md section 3). The CPU backend is invariant by construction, so on
// the CPU every mode runs the same kernels; the CUDA backend distinguishes them.
enum class NumericsMode : uint8_t {
  kInvariant,  // batch-invariant kernels: V1–V11 hold (the default for deterministic requests)
  kFast,       // library heuristics, no guarantee (the speed reference)
};

std::string_view numerics_mode_name(NumericsMode mode);
// Parses "invariant" / "fast"; throws detllm::Error listing the valid names otherwise.
NumericsMode parse_numerics_mode(std::string_view name);

struct DeterminismPolicy {
  NumericsMode deterministic_mode = NumericsMode::kInvariant;  // for deterministic requests
  NumericsMode default_mode = NumericsMode::kInvariant;        // for the others
  bool deterministic_by_default = true;  // a request that does not say is deterministic
  bool self_check = true;                // run the startup self-check (design.md Rule 3)

  // Throws detllm::Error when the combination cannot keep its promise.
  void validate() const;
  // Mode serving a request, given its own `deterministic` flag.
  NumericsMode mode_for(bool deterministic) const {
    return deterministic ? deterministic_mode : default_mode;
  }
  // One line for headers, logs and the fingerprint, e.g. "det=invariant;other=fast".
  std::string describe() const;
};

}  // namespace detllm
