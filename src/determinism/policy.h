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

// The KV cache's storage dtype, a numerics setting (it enters the fingerprint through the
// backend's build string, cli/backend.cpp). kAuto: the backend's own (CUDA bf16, CPU fp32).
// kFP8: K and V rounded once to E4M3 with per-(layer, KV head) scales fixed at load
// (docs/models.md, "FP8 KV cache"); the CPU backend.
enum class KvDType : uint8_t { kAuto, kBF16, kF32, kFP8 };
std::string_view kv_dtype_name(KvDType dtype);  // "auto", "bf16", "fp32", "fp8"
// Parses the names; throws detllm::Error listing the valid names otherwise.
KvDType parse_kv_dtype(std::string_view name);
// The CPU backend's activation rounding before a matmul on Q4_0 / Q4_1 / Q8_0 weights, a
// numerics class (it enters the fingerprint through the backend's build string,
// backends/backends.cpp; the CLI's --activations):
//   kF32: none (the default); the matmul has the bits of the fp32 matmul on the dequantized
//         weights — the class the golden logits hold to transformers' within 1e-4.
//   kQ8:  x rounded to int8 per 32-element block and integer dot products, as llama.cpp does;
//         defined by kernels/ref/q8_act_ref.h. Faster single-sequence decode, a different
//         rounding (logits up to ~1.3 from transformers' on the default model). Other weight
//         types (fp32, f16, bf16, Q5_0, Q5_1, IQ4_NL, the k-quants, IQ4_XS) stay on the kF32
//         path.
enum class CpuActivations : uint8_t { kF32, kQ8 };
std::string_view cpu_activations_name(CpuActivations act);  // "f32", "q8"
// Parses the two names; throws detllm::Error listing the valid names otherwise.
CpuActivations parse_cpu_activations(std::string_view name);
// Parses "invariant" / "fast"; throws detllm::Error listing the valid names otherwise.
NumericsMode parse_numerics_mode(std::string_view name);

// The determinism strategies of design.md section 3, one engine, measured side by side. A mode
// fixes the backend numerics AND the execution constraints (scheduler, padding); the mapping
// lives in one place, determinism/modes.h.
enum class DeterminismMode : uint8_t {
  kInvariant,  // batch-invariant kernels by construction (the default): V1–V11
  kFast,       // library heuristics (cuBLAS default), no constraint: the speed reference
  kBiNaive,    // one fixed GEMM tile config for every shape, no split-K (TML / vLLM / SGLang)
  kPadded,     // CoRun: isolated whole-prompt prefill, decode at one padded shape, CUDA graphs
  kVerified,   // LLM-42: fast decode + verification windows on the invariant path + rollback
};
inline constexpr DeterminismMode kAllDeterminismModes[] = {
    DeterminismMode::kFast, DeterminismMode::kInvariant, DeterminismMode::kBiNaive,
    DeterminismMode::kPadded, DeterminismMode::kVerified};

// "fast", "invariant", "bi-naive", "padded", "verified".
std::string_view determinism_mode_name(DeterminismMode mode);
// Parses the five names; throws detllm::Error listing the valid names otherwise.
DeterminismMode parse_determinism_mode(std::string_view name);

struct DeterminismPolicy {
  // The strategy the engine runs (modes.h: backend numerics + execution constraints). Its
  // numerics path must be deterministic_mode's; policy_for_mode() builds a consistent policy.
  DeterminismMode mode = DeterminismMode::kInvariant;
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
  // One line for headers, logs and the fingerprint, e.g.
  // "det=invariant;other=fast;default=det;self_check=on;mode=invariant".
  std::string describe() const;
};

}  // namespace detllm
