// `--backend` / `--numerics` / `--mode` / `--kv-dtype` / `--activations` / `--quantization` /
// `--device` / `--gemm-plan-cache` / `--tensor-parallel` for the CLI commands (backend.h); the
// factory behind them is backends/backends.cpp.
#include "cli/backend.h"

namespace detllm::cli {

void add_numerics_class_options(CLI::App& cmd, BackendOptions& o) {
  cmd.add_option("--kv-dtype", o.kv_dtype,
                 "KV cache dtype, part of the numerics fingerprint: auto (the backend's own: bf16 "
                 "on cuda, fp32 on cpu), bf16 (cuda: K/V rounded once when appended, attention on "
                 "the tensor cores), fp32 (cuda: the CUDA-core attention kernel) or fp8 (K/V "
                 "rounded once to E4M3 when appended, scales per layer and KV head bounded from "
                 "the weights at load; on cuda read by the packed tensor-core attention; "
                 "docs/models.md, FP8 KV cache)")
      ->check(CLI::IsMember({"auto", "bf16", "fp32", "fp8"}))
      ->capture_default_str();
  cmd.add_option("--activations", o.activations,
                 "cpu: the activation rounding before matmuls on Q4_0/Q4_1/Q8_0 weights, a "
                 "numerics class in the fingerprint: f32 (the default: no rounding, bits of the "
                 "fp32 matmul on the dequantized weights, logits within 1e-4 of transformers) or "
                 "q8 (int8 per 32-block and integer dot products, as llama.cpp: faster "
                 "single-sequence decode, logits up to ~1 from transformers'; docs/perf.md)")
      ->check(CLI::IsMember({"f32", "q8"}))
      ->capture_default_str();
  cmd.add_option("--quantization", o.quantization,
                 "fp8: quantize a bf16/fp16/fp32 checkpoint's projections to FP8 E4M3 at load "
                 "(one scale per output channel, activations rounded per token; vLLM's name), "
                 "a numerics class in the fingerprint; cpu and cuda (sm_90: the FP8 wgmma "
                 "GEMM). FP8 checkpoints (compressed-tensors, fbgemm_fp8) need no flag: their "
                 "quantization_config says so (docs/models.md, FP8)")
      ->check(CLI::IsMember({"fp8"}));
}

void add_backend_options(CLI::App& cmd, BackendOptions& o, const std::string& numerics_help) {
  cmd.add_option("--backend", o.backend,
                 std::string("Where the model runs: cpu (SIMD, threaded) or cuda (one NVIDIA "
                             "Hopper GPU, bf16 or FP8 weights; docs/cuda.md)") +
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
  add_numerics_class_options(cmd, o);
  cmd.add_option("--device", o.device, "CUDA device ordinal (--backend cuda)")
      ->check(CLI::Range(0, 63))
      ->capture_default_str();
  add_gemm_plan_cache_options(cmd, o);
}

void add_tensor_parallel_option(CLI::App& cmd, BackendOptions& o) {
  cmd.add_option("--tensor-parallel", o.tensor_parallel,
                 "Tensor parallelism invariant across degrees (docs/tensor_parallel.md): N ranks, "
                 "threads of this process on the cpu backend, --threads shared among them (each "
                 "max(1, threads / N)). Every N gives the same bits and the same fingerprint: "
                 "o_proj/down_proj run in the model's canonical chunks, a numerics of its own "
                 "(1 = those chunks on one rank; without the flag: the one-device model). The "
                 "degrees a model allows are listed when one is refused. Not on cuda yet")
      ->check(CLI::Range(1, 64));
}

void add_gemm_plan_cache_options(CLI::App& cmd, BackendOptions& o) {
  CLI::Option* path =
      cmd.add_option("--gemm-plan-cache", o.gemm_plan_cache,
                     "cuda: the file where the verified cuBLASLt GEMM plans persist across "
                     "restarts (default: $XDG_CACHE_HOME/detllm/gemm-plans-<GPU, driver and "
                     "library key>.bin, or ~/.cache/detllm/...). Persisted plans are re-verified "
                     "bit for bit before use; a stale or corrupt file is tuned again and rewritten");
  cmd.add_flag("--no-gemm-plan-cache", o.no_gemm_plan_cache,
               "cuda: tune the GEMM plans at every start; read and write no plan file")
      ->excludes(path);
}

}  // namespace detllm::cli
