// The tensor-core attention's planner (the CUDA backend's bf16-KV attention, kernels/cuda/
// attention_tc*.cu, attention_wg.cu): which kernel runs a step, with which CTA (tokens a CTA,
// the unmasked fast path, Q from shared memory), split placement, and for the decode warps
// which warp, ring and grid. Host logic only — no CUDA header — so `detllm check` prints a
// model's plans and CI tests the choices on the CPU (tests/kernels/attention_plan_test.cpp).
//
// Every plan gives the same bits: a row's result depends only on its q, its position and the
// KV values, never on the kernel, the CTA, the split placement or the warp that runs it (the
// per-tile arithmetic, the split grid and the merge are one code, attention_tc_common.cuh;
// test_cuda --gtest_filter='*CudaAttentionTc*' forces every kernel on every step and compares
// bit for bit). The planner only picks speed: the choices below were measured on the H200
// (docs/cuda.md, "Attention on the tensor cores" and the sections after it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace detllm::kernels {

// The numerics grid of the tensor-core attention: KV tiles of kAttentionTcTile positions and
// splits of kAttentionTcSplit, aligned to absolute position 0 (a split's state starts from
// zero; splits merge in ascending order). Numerics, not speed: never chosen from a step.
inline constexpr int kAttentionTcTile = 64;
inline constexpr int kAttentionTcSplit = 256;
// The SMs the grid choices assume (the H200's 132; any count gives the same bits).
inline constexpr int kAttentionPlanSms = 132;

// One attention call of a step, as the planner sees it.
struct AttentionStepShape {
  int32_t n_tokens = 0;    // query rows of the step (tokens)
  int32_t n_seqs = 0;      // sequences: rows of the block table
  int32_t n_heads = 0;     // query heads
  int32_t n_kv_heads = 0;  // KV heads
  int32_t head_dim = 0;
  int32_t block_size = 0;  // KV positions a block
  int32_t max_blocks = 0;  // the block table's width (blocks of the longest row)
  // An FP8 cache: only the kernels whose loads dequantize it apply — the decode warps (their
  // rings, in place) and the packed CTA; the others' cp.async rings copy bf16 rows.
  bool kv_fp8 = false;
};

// The kernels a plan can run (each of them chosen on some steps).
enum class AttentionKernel : int8_t {
  // attention_tc_decode*.cu: a warp per (token, KV head, run of splits), each with its own
  // cp.async ring. Decode-like steps with ≥ kAttentionDecodeMinItems items.
  kDecodeWarps,
  // attention_tc_shared.cu: 4 warps share each KV split, a tile each (≤ 16 rows a CTA).
  // Decode-like steps whose split CTAs fit one wave of the card.
  kSharedSplit,
  // attention_wg.cu: 4 warps × 16 rows, both products on warpgroup MMAs (head_dim 128: Q in
  // registers; 64: Q from shared memory, from kAttentionWgHd64MinCtas CTAs). Prefill, chunks
  // and mixed steps.
  kWarpgroup,
  // attention_tc.cu: 4 warps × 16 rows on mma.sync (the fast path on non-decode-like steps).
  // Whatever none of the others takes.
  kPacked,
  // attention_tc.cu: two streams of 4 warps × 32 rows over alternate splits (head_dim ≥ 64).
  // Non-decode-like steps of ≥ kAttentionStreamsMinTokens tokens the warpgroup does not take.
  kPackedStreams,
};
inline constexpr int kAttentionKernels = 5;
const char* attention_kernel_name(AttentionKernel k);

// Overrides of the planner (CudaOptions::attention_kernel / attention_split_blocks): for tests
// that force every kernel on every step, and for benchmarks. -1 leaves the choice to the plan.
struct AttentionForce {
  // An AttentionKernel value: that kernel on every step it can run (attention_kernel_applies),
  // the chosen plan elsewhere. -1 chosen.
  int kernel = -1;
  // Split placement: -1 chosen; 0 a row's splits one after another in its CTA (warp); 1 a CTA
  // (a warp) per split, then the merge kernel.
  int split = -1;
};

struct AttentionPlan {
  AttentionKernel kernel = AttentionKernel::kPacked;
  bool decode_like = false;  // ≤ 2 query tokens a sequence
  int max_splits = 0;        // KV splits of a row of the block table's width
  // The CTA kernels (all but kDecodeWarps):
  int warps = 4;             // warps a CTA (kPackedStreams: 8, two streams of 4)
  int tq = 1;                // tokens a CTA (1 on decode-like steps: the token's heads in warp 0)
  bool fast = false;         // kPacked, kWarpgroup: unmasked tiles skip the mask selects
  bool q_smem = false;       // kWarpgroup: Q from shared memory (head_dim 64)
  bool split_blocks = false;  // a CTA per split + the merge kernel (else a row's splits in its CTA)
  // kDecodeWarps:
  bool transposed = false;   // the transposed warp (Sᵀ = K·Qᵀ, quarter tiles; n_rep ≤ 8), else
                             // the row-layout warp on half tiles (n_rep 9–16)
  int ring = 0;              // chunks in each warp's ring (quarters: 3 or 6; halves: 3)
  int warps_per_cta = 0;     // decode warps a CTA
  int splits_per_warp = 0;   // splits a warp runs (max_splits: the warp merges its rows itself)
  int n_zc = 0;              // runs of splits a row (1: no merge kernel)
  int64_t blocks = 0;        // CTAs of the decode launch
  // Both: floats of split partials the launch needs (0 when it runs unsplit).
  size_t scratch_floats = 0;
};

// Whether the tensor-core attention runs these heads at all (head_dim 16, 32, 64, 128 and
// 1 ≤ n_heads / n_kv_heads ≤ 64); others need the fp32-KV kernel.
bool attention_tc_supported(int32_t head_dim, int32_t n_rep);
// Whether `kernel` can run a step of this shape (every kernel needs attention_tc_supported;
// kDecodeWarps and kSharedSplit n_rep ≤ 16; kDecodeWarps its partials within 512 MiB;
// kWarpgroup head_dim 64 or 128; kPackedStreams head_dim ≥ 64).
bool attention_kernel_applies(AttentionKernel kernel, const AttentionStepShape& s);

// The plan of a step (s must be attention_tc_supported). Pure: the same shape and force give
// the same plan.
AttentionPlan plan_attention(const AttentionStepShape& s, const AttentionForce& force = {});

// One line: "decode warps (transposed, quarter ring 3, 16 warps a CTA, 2 splits a warp, merge
// kernel)", "warpgroup (16 tokens a CTA, fast path, Q in registers, a CTA per split)", …
std::string describe(const AttentionPlan& p);

// Splits of a row of the block table's full width.
int attention_max_splits(const AttentionStepShape& s);
// Floats of split partials of every row of the step (a row's (m, l, o) a split).
size_t attention_partials_floats(const AttentionStepShape& s);

// The decode warps' grid (attention_tc_decode*.cu launch it; the planner fills the plan with
// it): splits a warp runs (force_split 0: all of a row's, 1: one; -1: all of a row's when the
// rows are short — at most kAttentionWholeRowSplits splits — and their warps fill 3/4 of the
// card's SMs, else aimed at two waves of the card's warps), runs of splits a row, CTAs.
inline constexpr int kAttentionWholeRowSplits = 4;
struct AttentionDecodeGrid {
  int max_splits = 0, per_warp = 1, n_zc = 0;
  int64_t blocks = 0;
};
AttentionDecodeGrid attention_decode_grid(const AttentionStepShape& s, int warps_per_cta,
                                          int force_split);
// The transposed warp's quarter-tile ring for a step: 3 (16 warps a CTA) when the step's
// (token, KV head, split) items fill 3/4 of the card's SMs with 16-warp CTAs, else 6 (8 warps).
int attention_quarter_ring(const AttentionStepShape& s);

// The thresholds (H200, docs/cuda.md).
inline constexpr int64_t kAttentionDecodeMinItems = 512;     // decode warps from these items
inline constexpr int32_t kAttentionStreamsMinTokens = 6144;  // the 32-row streams from these
inline constexpr int64_t kAttentionWgHd64MinCtas = 512;      // head_dim 64 on wgmma from these
inline constexpr int kAttentionDecodeMaxRep = 16;            // n_rep the decode warps take
inline constexpr int kAttentionTransposedMaxRep = 8;         // n_rep the transposed warp takes

}  // namespace detllm::kernels
