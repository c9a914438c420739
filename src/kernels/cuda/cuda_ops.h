// The CUDA backend (Hopper, sm_90a): kernels::Ops on one GPU, bf16 weights, fp32 activations.
// Mode `invariant` runs batch-invariant kernels of our own (docs/cuda.md says why each one is);
// mode `fast` swaps the GEMM for default cuBLAS, the speed reference with no guarantee.
// Tests: build-cuda/tests/test_cuda (skips without a GPU); bench: build-cuda/benchmarks/cuda_gemm_bench.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "determinism/modes.h"
#include "determinism/policy.h"
#include "kernels/cuda/fp8_rule.h"
#include "kernels/ops.h"

namespace detllm::kernels {

struct CudaOptions {
  int device = 0;                                // CUDA device ordinal
  NumericsMode mode = NumericsMode::kInvariant;  // invariant kernels, or cuBLAS default (fast)
  // The KV cache dtype (a numerics setting, in the fingerprint): bf16 (the default; K/V
  // rounded once at append; attention on the tensor cores, attention_tc*.cu) or fp32 (the
  // CUDA-core kernel, attention.cu). Any other dtype is refused.
  DType kv_dtype = DType::kBF16;
  // The attention planner's overrides (kernels/attention_plan.h; every plan gives the same bits,
  // tests check that); for tests, which force every kernel and placement on every step, and
  // benchmarks. attention_kernel: -1 the plan's choice, else an AttentionKernel value forced on
  // every step that kernel can run (bf16 KV only). attention_split_blocks: where a row's KV
  // splits run, -1 chosen by grid size; 0 all in the row's CTA (warp); 1 a CTA (warp) per split
  // + the merge kernel (both KV dtypes).
  int attention_kernel = -1;
  int attention_split_blocks = -1;
  // Device sampling (sampling.cu): blocks a row's full-vocabulary passes use (0 chosen from the
  // batch; > 0 forced) and the tokens a row's candidate lists hold (-1 the default; 0 none:
  // every boundary searched over the row by one block). Any values give the same bits (tests
  // check that); for tests and benchmarks.
  int sample_blocks_per_row = 0;
  int sample_candidate_capacity = -1;
  // GEMM tile variant of each size class: -1 the tuned default; 0…3 for benchmarks and tests.
  // Any value gives the same bits (the K order is fixed by the weight shape alone).
  int gemm_variant = -1;
  // Experiments only (cuda_gemm_bench): force the GEMM's K-split count. This CHANGES the
  // numerics (it is part of the fingerprint's "engine settings"); 0 = the shape's own count.
  int gemm_splits_override = 0;
  // Invariant mode: where a cuBLASLt execution was verified at runtime to give every bit of
  // the invariant GEMM kernel and is faster, use it (gemm_lt.h). Same bits either way; off
  // only to measure the kernel alone. Ignored when gemm_variant or the override is set.
  bool gemm_lt = true;
  // The same for the FP8 GEMM of per-channel weights (gemm_lt.h, LtOperands::kFp8E4M3): on
  // where gemm_lt is, off only to measure the FP8 kernel alone. Same bits either way.
  bool fp8_gemm_lt = true;
  // The `bi-naive` mode (determinism/modes.h): every GEMM runs our invariant kernel with ONE
  // tile configuration for every M (the large 128×128×64 tile), split count 1, no cuBLASLt —
  // the published batch-invariant strategy, kept to measure what it costs. Same bits as the
  // invariant mode; invariant numerics only (ignored in fast mode).
  bool gemm_fixed_tile = false;
  // The step's small kernels (add + RMSNorm, RoPE + KV append, the attention of the decode
  // warps and of the shared-split CTA, their merge, SiLU·mul) launched with programmatic
  // dependent launch: each may be scheduled while the kernel before it finishes, and waits for
  // it before touching memory (kernels/cuda/pdl.cuh). Changes no value (tests). -1 chosen: on
  // for steps of at most kPdlMaxRows rows (H200 decode step: 3% faster at batch 1 with the
  // shared-split attention, no faster at 8 and 1–2% slower at 64 in earlier builds;
  // docs/cuda.md), 0 off, 1 on.
  int programmatic_launch = -1;
  // Mixture of experts, invariant numerics: the grouped GEMMs of a step with at most this many
  // (token, expert) rows run as one launch on device-side offsets (moe_grouped.cu); larger
  // ones (prefill) download the offsets and run the invariant GEMM once per expert, whose
  // tiles reuse each expert's weights across its many rows. The same bits either way (tests);
  // a speed setting, for benchmarks. 0: always per expert; -1: always one launch.
  int32_t moe_grouped_rows = 4096;
  // The invariant per-channel FP8 linears' GEMM: the split-K wgmma GEMM
  // (fp8_gemm_wg_split.cuh) with each shape's split count from the device
  // (fp8_gemm_wg_auto_splits: from n and the SMs, never from m) — the default, what served
  // models run (kCudaFp8DefaultSplits = -1). Experiments (cuda_e2e_bench --fp8-wg-splits,
  // tests): S > 1 runs of k for every shape, or 0/1 for the unsplit wgmma GEMM. Each is its
  // own numerics (cuda_fp8_gemm_rule(splits) names it).
  int fp8_wg_splits = kCudaFp8DefaultSplits;
  // The split launcher's variant for steps of more than kFp8GemmWgSplitCtaMaxM rows (prefill):
  // -1 its own choice (4, the TMA-fed warp-specialised kernel, fp8_gemm_wg_ws.cuh), 2 the
  // cp.async 128-row tiles. Same bits (tests); a speed setting, for benchmarks.
  int fp8_wg_prefill_variant = -1;
  // The FP8 linears' per-token quantizer fused into the producer of their input (add_rmsnorm
  // and silu_mul_rows write the E4M3 rows beside the bf16 ones, Ops::announce_gemm_input).
  // Same bits (tests); off only to measure the separate quantizer's launch.
  bool fp8_fused_quantize = true;
  // Where the verified cuBLASLt plans persist across restarts (gemm_lt.h; the file:
  // kernels/gemm_plan_file.h). Off by default (tests, benchmarks); the CLI turns it on
  // (--gemm-plan-cache PATH, --no-gemm-plan-cache). path "" = the default location
  // (default_gemm_plan_cache_path of the device's key). Persisted plans are re-verified before
  // use, so this changes no bit, only how long preparing takes.
  struct GemmPlanCache {
    bool enabled = false;
    std::string path;
  } gemm_plan_cache = {};
};

// The gemm_variant value gemm.cu's planner reads as "the one fixed tile" (gemm_fixed_tile).
inline constexpr int kGemmVariantFixedTile = 4;

// The options that run a determinism mode's backend numerics (determinism/modes.h) on `device`.
CudaOptions cuda_options_for(const BackendNumerics& numerics, int device);

// Throws detllm::Error when the device is missing or is not a Hopper GPU (the kernels are
// built for sm_90a only).
std::unique_ptr<Ops> make_cuda_ops(const CudaOptions& options);

// The GEMM plans an invariant CUDA ops object has made so far, one line each: weight shape,
// M bucket, the execution chosen (the invariant kernel or a cuBLASLt one verified bit-equal to
// it), how many candidates were tried and bit-equal, and both times. Empty for other ops.
std::vector<std::string> cuda_gemm_plan_report(const Ops& ops);
// How many FP8 linears so far read the FP8 rows their input's producer wrote
// (CudaOptions::fp8_fused_quantize) instead of quantizing: tests check the fused path is taken.
int64_t cuda_fp8_fused_reads(const Ops& ops);
// How many of those plans run on cuBLASLt (tests check the verified path is really used).
int cuda_gemm_lt_plan_count(const Ops& ops);

// What the GEMM plan file did so far (gemm_lt.h's LtPlanFileStats), for progress lines and
// tests. Zeros and an empty path for other ops or when plans are not persisted.
struct CudaGemmPlanFileSummary {
  std::string path;          // the plan file ("" = not persisted)
  int plans = 0;             // plans made so far (tuned or taken from the file)
  int reverified = 0;        // persisted cuBLASLt plans re-verified bit for bit and used
  int kernel_from_file = 0;  // persisted plans that run the invariant kernel
  int rejected = 0;          // persisted plans refused (then tuned again)
  int tuned = 0;             // plans tuned in full
  int saves = 0;             // times the file was written
  std::vector<std::string> warnings;
};
CudaGemmPlanFileSummary cuda_gemm_plan_file_summary(const Ops& ops);

// Number of usable CUDA devices; 0 when there is no driver or no GPU. Never throws, so tests
// can skip cleanly on machines without a GPU.
int cuda_device_count();

// "NVIDIA H200 (sm_90, driver 13000, runtime 13000)" — for reports and fingerprints.
std::string cuda_device_description(int device);

}  // namespace detllm::kernels
