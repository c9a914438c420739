// `--backend` / `--numerics` / `--mode` / `--kv-dtype` / `--device` for the CLI commands
// (backend.h); the factory behind them is backends/backends.cpp.
#include "cli/backend.h"

namespace detllm::cli {

void add_backend_options(CLI::App& cmd, BackendOptions& o, const std::string& numerics_help) {
  cmd.add_option("--backend", o.backend,
                 std::string("Where the model runs: cpu (SIMD, threaded) or cuda (one NVIDIA "
                             "Hopper GPU, bf16 weights; docs/cuda.md)") +
                     (cuda_backend_built() ? "" : ". This build has no CUDA backend"))
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  CLI::Option* numerics = cmd.add_option("--numerics", o.numerics, numerics_help)
                              ->check(CLI::IsMember({"invariant", "fast"}))
                              ->capture_default_str();
  cmd.add_option("--mode", o.mode,
                 "Determinism mode (docs/modes.md): fast (library kernels, no guarantee), "
                 "invariant (the default: batch-invariant kernels, V1-V11), bi-naive (one fixed "
                 "GEMM tile, no split-K), padded (CoRun: isolated whole prefill, decode at one "
                 "padded shape with CUDA graphs, library kernels), verified (LLM-42: fast "
                 "decode, windows re-verified on the invariant path, rollback). Replaces "
                 "--numerics")
      ->check(CLI::IsMember({"fast", "invariant", "bi-naive", "padded", "verified"}))
      ->excludes(numerics);
  cmd.add_option("--kv-dtype", o.kv_dtype,
                 "KV cache dtype, part of the numerics fingerprint: auto (the backend's own: bf16 "
                 "on cuda, fp32 on cpu), bf16 (cuda: K/V rounded once when appended, attention on "
                 "the tensor cores) or fp32 (cuda: the CUDA-core attention kernel)")
      ->check(CLI::IsMember({"auto", "bf16", "fp32"}))
      ->capture_default_str();
  cmd.add_option("--device", o.device, "CUDA device ordinal (--backend cuda)")
      ->check(CLI::Range(0, 63))
      ->capture_default_str();
}

}  // namespace detllm::cli
