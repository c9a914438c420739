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
#include "kernels/ops.h"

namespace detllm::kernels {

struct CudaOptions {
  int device = 0;                                // CUDA device ordinal
  NumericsMode mode = NumericsMode::kInvariant;  // invariant kernels, or cuBLAS default (fast)
  // Where attention's KV splits run: -1 chosen by grid size; 0 all in the row's block; 1 a
  // block per split + merge kernel. Any value gives the same bits (tests check that).
  int attention_split_blocks = -1;
  // The KV cache dtype (a numerics setting, in the fingerprint): bf16 (the default; K/V
  // rounded once at append; attention on the tensor cores, attention_tc.cu) or fp32 (the
  // CUDA-core kernel, attention.cu). Any other dtype is refused.
  DType kv_dtype = DType::kBF16;
  // Warps per CTA of the tensor-core attention: 0 chosen by the step; 1, 4 or 8 warps of 16
  // rows (tests show every shape gives the same bits).
  int attention_tc_warps = 0;
  // Rows per warp of its packed CTAs, in m-tiles of 16: 0 chosen by the step (1 when
  // attention_tc_warps is forced); 1; 2 (4 warps of 32 rows sharing each K/V fragment). And the
  // K/V tiles in the 2-m-tile CTAs' cp.async ring: 0 chosen, 2 or 3. Same bits (tests).
  int attention_tc_m_tiles = 0;
  int attention_tc_stages = 0;
  // Streams of the 2-m-tile CTAs: 0 chosen; 1; 2 (8 warps: two streams of 4 over alternate
  // KV splits of the same rows, merged in order; head_dim ≥ 64, else 1). Same bits (tests).
  int attention_tc_streams = 0;
  // 4 warps of 16 rows: tiles with no column past any of a warp's rows skip the mask selects
  // (-1 chosen, 0 off, 1 on). attention_tc_stages = 3 gives these CTAs a ring of 3 K/V tiles.
  int attention_tc_fast = -1;
  // Those CTAs' products on warpgroup MMAs (attention_wg.cu: -1 chosen: prefill, chunks and
  // mixed steps; 0 never; 1 wherever head_dim is 128; 2 with Q from shared memory, head_dim 64
  // or 128, not yet run on a GPU). Same bits (tests).
  int attention_tc_wgmma = -1;
  // A CTA per KV split (the packed 16-row warps at small batch): -1 chosen (0), 0 a merge
  // kernel after the attention, 1 the split CTA that finishes last merges its rows (measured no
  // faster). Same bits (tests).
  int attention_tc_merge = -1;
  // The shared-split CTA (attention_tc_shared.cu: the four warps of a CTA share each KV split,
  // a tile each; at most 16 rows): -1 chosen (decode-like steps when no CTA shape is forced), 0
  // never, 1 every step whose tokens' heads fit 16 rows. Same bits (tests).
  int attention_tc_shared = -1;
  // The decode schedule of the tensor-core attention (attention_tc_decode.cu: a warp per token,
  // KV head and run of splits): -1 for decode-like steps, 0 never, 1 for every step (tests).
  // Same bits as the packed schedule (tests show it).
  int attention_tc_decode = -1;
  // Chunks in each warp's ring in the decode schedule: 0 chosen (3); of whole K/V tiles 2, 3,
  // 4 or 6 (12 / ring warps a CTA), of half tiles 3, 4 or 6 (24 / ring warps; the chosen
  // chunks, attention_tc_decode_chunk below). Same bits for every value (tests); for
  // benchmarks and tests.
  int attention_tc_decode_ring = 0;
  // The decode schedule's copies: 0 chosen (2), 1 cp.async without an L2 prefetch size, 2
  // with an L2 prefetch of 128 bytes. Same bits for every value (tests); for benchmarks and
  // tests.
  int attention_tc_decode_copy = 0;
  // The decode ring's chunks: 0 chosen, 1 whole K/V tiles, 2 half tiles (32 positions: twice
  // the warps for the same shared memory; attention_tc_decode_ring then counts halves: 3, 4 or
  // 6, and the copies keep the prefetch), 3 half and 4 quarter tiles on the transposed warp
  // (attention_tc_decode_nq.cu, Sᵀ = K·Qᵀ, steps of n_rep ≤ 8, else half tiles; quarters: 48 /
  // ring warps, ring 0 chosen by the step). Same bits (tests); for benchmarks and tests.
  int attention_tc_decode_chunk = 0;
  // Tests only: the negative control of the invariance tests, a tensor-core attention whose
  // row sums depend on the row's place in the tile (the tests must catch it). Never set it
  // otherwise.
  bool attention_tc_layout_dependent = false;
  // Device sampling (sampling.cu): blocks a row's full-vocabulary passes use (0 chosen from the
  // batch; > 0 forced) and the tokens a row's candidate lists hold (-1 the default; 0 none:
  // every boundary searched over the row by one block). Any values give the same bits (tests
  // check that); for tests and benchmarks.
  int sample_blocks_per_row = 0;
  int sample_candidate_capacity = -1;
  // GEMM tile variant of each size class: -1 the tuned default; 0…3 for benchmarks and tests.
  // Any value gives the same bits (the K order is fixed by the weight shape alone).
  int gemm_variant = -1;
  // The GEMM's small-m schedule (gemv.cu, gemv_stream.cu) for m ≤ 16: -1 the default (off:
  // slower than the verified cuBLASLt plans on the H200, docs/cuda.md "Small-m GEMV"), 0 off
  // (gemm.cu's small tiles), c + 1 forces configuration c (0…5 the warp rings, 6…10 the
  // CTA-wide stream; benchmarks, tests). Same bits either way. Off when gemm_variant is set or
  // in the bi-naive mode.
  int gemm_gemv = -1;
  // Experiments only (cuda_gemm_bench): force the GEMM's K-split count. This CHANGES the
  // numerics (it is part of the fingerprint's "engine settings"); 0 = the shape's own count.
  int gemm_splits_override = 0;
  // Invariant mode: where a cuBLASLt execution was verified at runtime to give every bit of
  // the invariant GEMM kernel and is faster, use it (gemm_lt.h). Same bits either way; off
  // only to measure the kernel alone. Ignored when gemm_variant or the override is set.
  bool gemm_lt = true;
  // The `bi-naive` mode (determinism/modes.h): every GEMM runs our invariant kernel with ONE
  // tile configuration for every M (the large 128×128×64 tile), split count 1, no cuBLASLt —
  // the published batch-invariant strategy, kept to measure what it costs. Same bits as the
  // invariant mode; invariant numerics only (ignored in fast mode).
  bool gemm_fixed_tile = false;
  // Weights of the next GEMM pulled into the L2 beside the small ops before it, for GEMMs of
  // at most max_m rows (kernels/cuda/weight_prefetch.h): bytes a GEMM, -1 kWeightPrefetchL2Share
  // of the L2, 0 off (the default: measured 1–3% slower on the H200, docs/cuda.md). A hint:
  // changes no value (tests).
  struct WeightPrefetch {
    int64_t bytes = 0;
    int32_t max_m = 64;
  } weight_prefetch = {};
  // The step's small kernels (add + RMSNorm, RoPE + KV append, the attention of the decode
  // warps and of the shared-split CTA, their merge, SiLU·mul) launched with programmatic
  // dependent launch: each may be scheduled while the kernel before it finishes, and waits for
  // it before touching memory (kernels/cuda/pdl.cuh). Changes no value (tests). -1 chosen: on
  // for steps of at most kPdlMaxRows rows (H200 decode step: 3% faster at batch 1 with the
  // shared-split attention, no faster at 8 and 1–2% slower at 64 in earlier builds;
  // docs/cuda.md), 0 off, 1 on.
  int programmatic_launch = -1;
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

// The default weight prefetch: this share of the device's L2 a GEMM (the rest keeps the KV and
// activations of the ops in between).
inline constexpr double kWeightPrefetchL2Share = 0.6;

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
