// `--backend` / `--numerics` / `--mode` for the CLI commands and the factory behind them
// (backend.h). DETLLM_HAVE_CUDA comes from the detllm_cuda target, which the CLI links when it
// exists (CMakeLists.txt); this file is the only #if on it outside src/kernels/cuda.
#include "cli/backend.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/version.h"
#if defined(DETLLM_HAVE_CUDA)
#include "kernels/cuda/cuda_ops.h"
#endif

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

bool cuda_backend_built() {
#if defined(DETLLM_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

std::optional<DeterminismMode> selected_mode(const BackendOptions& o) {
  if (o.mode.empty()) return std::nullopt;
  return parse_determinism_mode(o.mode);
}

Backend make_backend(const BackendOptions& o, NumericsMode mode, int n_threads) {
  BackendNumerics n;
  n.numerics = mode;
  return make_backend(o, n, n_threads);
}

Backend make_backend(const BackendOptions& o, const BackendNumerics& mode_numerics,
                     int n_threads) {
  BackendNumerics numerics = mode_numerics;
  numerics.kv_dtype = parse_kv_dtype(o.kv_dtype);
  const NumericsMode mode = numerics.numerics;
  Backend b;
  if (o.backend == "cpu") {
    check(numerics.kv_dtype != KvDType::kBF16,
          "--kv-dtype bf16: the cpu backend stores KV in fp32 only; use --kv-dtype fp32 (or "
          "auto), or --backend cuda");
    b.ops = kernels::make_cpu_ops(n_threads);
    b.fingerprint_name = "cpu";
    b.build = std::string(cpu_simd_arch());
    b.description = fmt::format("cpu; build={}", cpu_simd_arch());  // as docs/server.md shows
    return b;
  }
  check(o.backend == "cuda", "unknown backend '{}' (valid: cpu, cuda)", o.backend);
#if defined(DETLLM_HAVE_CUDA)
  b.ops = kernels::make_cuda_ops(
      kernels::cuda_options_for(numerics, o.device));  // throws, saying why, without a usable GPU
  const std::string device = kernels::cuda_device_description(o.device);
  b.fingerprint_name = "cuda:" + device;
  const std::string_view kv = b.ops->kv_dtype() == DType::kF32 ? "fp32" : "bf16";
  b.build = fmt::format("sm_90a;kv={}", kv);
  b.description =
      fmt::format("cuda; device {}: {}; numerics={}{}; kv={}", o.device, device,
                  numerics_mode_name(mode), numerics.gemm_fixed_tile ? "; gemm=fixed-tile" : "",
                  kv);
  return b;
#else
  (void)mode;
  throw_error(
      "this build has no CUDA backend: rebuild with -DDETLLM_CUDA=ON on a machine with "
      "nvcc (docs/cuda.md), or use --backend cpu");
#endif
}

void install_backend(ModelBundle& bundle, Backend& backend) {
  check(backend.ops != nullptr, "install_backend: the backend was already installed");
  bundle.llama.reset();  // before its ops go away
  bundle.ops = std::move(backend.ops);
  bundle.llama =
      std::make_unique<LlamaModel>(bundle.model->config, bundle.model->weights, *bundle.ops);
}

}  // namespace detllm::cli
