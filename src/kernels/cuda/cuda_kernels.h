// Internal launchers of the CUDA backend's kernels (defined in the .cu files beside this; used
// by cuda_ops.cpp). Every pointer is device memory; every launcher returns the launch error.
// Shapes in comments; the invariance argument of each kernel is in its .cu file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/attention_plan.h"
#include "kernels/gemm_splits.h"

namespace detllm {
struct SampleRowParams;  // kernels/sampling/sample_row.h
struct SampleRowResult;
}  // namespace detllm

namespace detllm::kernels::cuda {

// ---- elementwise.cu ------------------------------------------------------------------
// out (n, dim) fp32 = table[ids[i], :]; table (vocab, dim) bf16 (is_bf16) or fp32.
// Ids outside 0..vocab-1 give NaN rows (the model validates ids before).
cudaError_t launch_embedding(const void* table, bool is_bf16, int64_t vocab, int64_t dim,
                             const int32_t* ids, int32_t n, float* out, cudaStream_t stream);
// One block of a fixed 256 threads per row; fixed reduction tree for every n and row.
// row_regs as launch_add_rmsnorm's (the same bits every way).
cudaError_t launch_rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
                           float* out, cudaStream_t stream, int row_regs = -1);
// x (n, n_heads, head_dim) in place; inv_freq (rot_dim / 2) device copy of the RopeTable.
cudaError_t launch_rope(float* x, int32_t n, int32_t n_heads, int32_t head_dim,
                        const int32_t* positions, const float* inv_freq, int32_t rot_dim,
                        cudaStream_t stream);
// cache_k/v [n_slots, row] ← k/v (n_tokens, row) at slots; row = n_kv_heads * head_dim.
cudaError_t launch_kv_append(const float* k, const float* v, const int32_t* slots, int32_t n_tokens,
                             int64_t row, int64_t n_slots, float* cache_k, float* cache_v,
                             cudaStream_t stream);
cudaError_t launch_silu_mul(const float* gate, const float* up, int64_t n, float* out,
                            cudaStream_t stream);
cudaError_t launch_add(float* x, const float* y, int64_t n, cudaStream_t stream);
cudaError_t launch_gather_rows(const float* x, int32_t dim, const int32_t* rows, int32_t n_rows,
                               float* out, cudaStream_t stream);
// out (n) bf16 bits = round-to-nearest-even(x (n)).
cudaError_t launch_f32_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);
// y (m, n) += bias (n), row-broadcast.
cudaError_t launch_add_bias(float* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream);

// ---- moe.cu (mixture of experts, kernels/ops.h; bits = kernels/ref/moe_ref.h) -------------
// experts / weights (n, k) = Ops::moe_route of logits (n, n_experts); a warp per token.
// cudaErrorInvalidValue unless 1 <= k <= n_experts <= kMaxRouteExperts (a lane keeps one
// bit per expert it owns: expert j on lane j % 32).
inline constexpr int32_t kMaxRouteExperts = 32 * 32;
cudaError_t launch_moe_route(const float* logits, int32_t n, int32_t n_experts, int32_t k,
                             bool renormalize, int32_t* experts, float* weights,
                             cudaStream_t stream);
// out (n, dim) = Ops::moe_combine (rank order, fp32, no contraction, no atomics).
cudaError_t launch_moe_combine(const float* y, const int32_t* rows, const float* weights,
                               int32_t n, int32_t k, int32_t dim, const float* shared,
                               const float* shared_gate, float* out, cudaStream_t stream);
// out (n_rows, dim) bf16 = x[rows[r], :] (bf16): the experts' grouped inputs.
cudaError_t launch_gather_rows_bf16(const uint16_t* x, int32_t dim, const int32_t* rows,
                                    int32_t n_rows, uint16_t* out, cudaStream_t stream);

// ---- moe_grouped.cu (device-side grouping and the grouped GEMM) -----------------------
// Ops::moe_group of experts (n, k): offsets (n_experts + 1), src_row (n k), rows (n k).
cudaError_t launch_moe_group(const int32_t* experts, int32_t n, int32_t k, int32_t n_experts,
                             int32_t* offsets, int32_t* src_row, int32_t* rows,
                             cudaStream_t stream);
// y rows [offsets[g], offsets[g + 1]) (stride ldy) = x (bf16, stride k) rows · w[g]ᵀ, every
// w[g] (n, k) bf16, w a device array of n_groups pointers; offsets on the device, rows_bound
// >= offsets[n_groups]. The invariant GEMM's bits (S = 1) for every row. k % 8 == 0.
cudaError_t launch_grouped_gemm(const uint16_t* x, const int32_t* offsets, int32_t n_groups,
                                int32_t rows_bound, const uint16_t* const* w, int32_t n,
                                int32_t k, float* y, int64_t ldy, cudaStream_t stream);

// ---- fused.cu (the model's fused ops, kernels/ops.h) -------------------------------
// x (n, dim) += y (when y != nullptr), then out (n, dim) bf16 = rmsnorm(x, w) rounded once:
// the bits of launch_add, launch_rmsnorm and the GEMM's rounding of its input.
// pdl: launched with programmatic dependent launch (pdl.cuh; the same bits). row_regs: -1
// the row in registers when it fits (row_reduce.cuh), 0 the loop, 4/8/16/32 forced (tests:
// the same bits every way; a forced count too small for dim is refused).
cudaError_t launch_add_rmsnorm(float* x, const float* y, const float* w, int32_t n, int32_t dim,
                               float eps, __nv_bfloat16* out, cudaStream_t stream,
                               bool pdl = false, int row_regs = -1);
struct QkvRopeArgs {
  const float* qkv = nullptr;  // (n, (n_heads + 2 n_kv_heads) head_dim): q, k, v heads
  int32_t n = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const float* q_norm = nullptr;  // (head_dim) or nullptr (then k_norm is nullptr too)
  const float* k_norm = nullptr;
  float eps = 0.0f;
  const int32_t* positions = nullptr;  // (n)
  const int32_t* slots = nullptr;      // (n)
  const float* inv_freq = nullptr;     // (half) device copy of the RopeTable
  int32_t half = 0;                    // rot_dim / 2
  int64_t n_slots = 0;
  void* cache_k = nullptr;  // [n_slots, n_kv_heads * head_dim], bf16 when kv_bf16 else fp32
  void* cache_v = nullptr;
  bool kv_bf16 = true;
  // FP8 KV (overrides kv_bf16): the cache holds E4M3 codes, e4m3(k / k_scale[h]) and
  // e4m3(v / v_scale[h]) (one IEEE division, the host codec's rounding), h the KV head;
  // k_scale, v_scale (n_kv_heads) device memory, the layer's scales fixed at load.
  bool kv_fp8 = false;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  float* q_out = nullptr;  // (n, n_heads, head_dim)
  bool pdl = false;         // programmatic dependent launch (pdl.cuh; the same bits)
};
// head_dim ≤ 256, even rot_dim ≤ head_dim.
bool qkv_rope_append_supported(int32_t head_dim, int32_t rot_dim);
// The bits of rmsnorm per q/k head (when q_norm), rope on q and k, and kv_append.
cudaError_t launch_qkv_rope_append(const QkvRopeArgs& a, cudaStream_t stream);
// out (n, ffn) bf16 = silu(gate) * up rounded once; gate_up (n, 2 ffn), each row gate then up.
cudaError_t launch_silu_mul_rows(const float* gate_up, int32_t n, int32_t ffn, __nv_bfloat16* out,
                                 cudaStream_t stream, bool pdl = false);

// *differ = 0 when the n_words 32-bit words of a and b are equal, else 1 (device-side bit
// comparison: the GEMM planner's verification, gemm_lt.cpp). reset = false: *differ is only
// ever set to 1 (one flag over several comparisons, read once).
cudaError_t launch_any_word_differs(const void* a, const void* b, int64_t n_words,
                                    uint32_t* differ, cudaStream_t stream, bool reset = true);

// ---- synthetic.cu --------------------------------------------------------------------
// dst (n) = synthetic weights, element i = synthetic_value(key, i, center, scale)
// (kernels/synthetic_values.h) bit for bit; bf16 (is_bf16, round to nearest even) or fp32.
cudaError_t launch_fill_uniform(void* dst, bool is_bf16, int64_t n, uint64_t key, float center,
                                float scale, cudaStream_t stream);

// ---- gemm.cu -------------------------------------------------------------------------
// The fixed K-split count of a weight shape and the split count used (an experiment's
// override): host functions, kernels/gemm_splits.h.
using kernels::gemm_effective_splits;
using kernels::gemm_shape_supported;
using kernels::gemm_split_count;
// Names the invariant GEMM's numerics — x rounded to bf16, k16 MMA chains in ascending k from
// zero, splits merged left to right, the split rule of gemm_split_count — for what must change
// with them: the key of the persisted GEMM plans (gemm_lt.h). Change it with either.
inline constexpr std::string_view kGemmNumericsRule = "bf16x;k16-asc;splits=1";
// Names the invariant kernel's schedules (the plans' speed choices were timed against them):
// also in the plan file's key, so plans made against older kernels are tuned again. (Was
// "tiles12;gemv6;stream5" while the small-m GEMV schedules were compiled in.)
inline constexpr std::string_view kGemmKernelSchedules = "tiles12";

struct GemmScratch {
  uint16_t* x_bf16 = nullptr;   // (m, k) bf16 activations, needs m * k elements
  float* partials = nullptr;    // (splits, m, n) fp32 split partials
  int32_t* counters = nullptr;  // (tiles) zeroed arrival counters, reset by the kernel
};
// Bytes of scratch a call needs (x_bf16, partials, counters).
struct GemmScratchNeed {
  size_t x_bf16 = 0, partials = 0, counters = 0;
};
GemmScratchNeed gemm_scratch_need(int32_t m, int64_t n, int64_t k, int variant,
                                  int splits_override);

// y (m, n) = x (m, k) fp32 · w (n, k) bf16 ᵀ (+ bias (n)), x rounded to bf16, fp32 accumulate.
// Every element's K-reduction: per split, mma.m16n8k16 steps over k in ascending order from
// zero; splits merged left to right; then + bias. The same for every m and row.
// variant: -1 = the tuned default; 0…3 = a tile variant of m's size class (benchmarks, tests).
cudaError_t launch_gemm_invariant(const float* x, int32_t m, const uint16_t* w, int64_t n,
                                  int64_t k, const float* bias, float* y,
                                  const GemmScratch& scratch, int variant, int splits_override,
                                  cudaStream_t stream);
// The same GEMM on x already rounded to bf16 (m, k): the same bits as launch_gemm_invariant
// on the fp32 tensor it was rounded from (scratch.x_bf16 is not used).
cudaError_t launch_gemm_invariant_bf16(const uint16_t* x, int32_t m, const uint16_t* w, int64_t n,
                                       int64_t k, const float* bias, float* y,
                                       const GemmScratch& scratch, int variant, int splits_override,
                                       cudaStream_t stream);

// ---- fp8_quant.cu, fp8_gemm.cu, fp8_kv.cu (FP8 E4M3; the codec: fp8_codec.cuh = core/fp8.h) ----
// Per-row activation quantizer: for each row of x (m, k), fp32 or bf16 (x_bf16),
// scale[r] = amax / 448 (amax = max |x| over the row, NaN ignored; 1 when amax is 0) and
// q (m, k) E4M3 codes = e4m3(x / scale[r]). Row-local (batch-invariant by construction).
cudaError_t launch_fp8_quantize_rows(const void* x, bool x_bf16, int32_t m, int64_t k, uint8_t* q,
                                     float* scale, cudaStream_t stream);
// Whether the FP8 GEMM takes this weight shape (k % 16 == 0: 16-byte copies of code rows).
bool fp8_gemm_shape_supported(int64_t n, int64_t k);
// Tile configurations of the FP8 GEMM (variant 0…kFp8GemmVariants-1; -1 = chosen from m).
inline constexpr int kFp8GemmVariants = 6;
// Names the FP8 GEMM's numerics (E4M3 → f16 exactly, k16 f16 MMA chains ascending from zero,
// one chain over K, then · x_scale · w_scale, then + bias): change it with them.
inline constexpr std::string_view kFp8GemmNumericsRule = "e4m3->f16;k16-asc;splits=1;*sx*sw";
// y (m, n) = ((Σ_k dec(xq[r,k]) · dec(w[c,k])) · x_scale[r]) · w_scale[c] (+ bias[c]): xq
// (m, k) and w (n, k) E4M3 codes, x_scale (m), w_scale (n) fp32. Each element one fp32 chain
// of f16 tensor-core k16 steps in ascending k from zero: the same for every m, row and
// variant (fp8_gemm.cuh).
cudaError_t launch_fp8_gemm(const uint8_t* xq, const float* x_scale, int32_t m, const uint8_t* w,
                            const float* w_scale, int64_t n, int64_t k, const float* bias,
                            float* y, int variant, cudaStream_t stream);
// launch_fp8_quantize_rows into xq (m, k) and x_scale (m), then launch_fp8_gemm.
cudaError_t launch_fp8_linear(const void* x, bool x_bf16, int32_t m, const uint8_t* w,
                              const float* w_scale, int64_t n, int64_t k, const float* bias,
                              float* y, uint8_t* xq, float* x_scale, int variant,
                              cudaStream_t stream);
// ---- fp8_gemm_wg.cu: the FP8 GEMM on FP8 warpgroup MMAs (prefill; fp8_gemm_wg.cuh) ----
// Tile configurations (variant 0…kFp8GemmWgVariants-1; -1 = chosen from m): every one the
// same bits.
inline constexpr int kFp8GemmWgVariants = 4;
// Names its numerics: wgmma m64n128k32 e4m3 (its own accumulator inside each 128-k block, from
// zero), blocks of 128 k added in fp32 in ascending k, then · x_scale · w_scale, then + bias.
// Not kFp8GemmNumericsRule's bits: a model runs one of the two for every m, never both.
inline constexpr std::string_view kFp8GemmWgNumericsRule =
    "wgmma-m64n128k32-e4m3;promote=128;fp32-asc;*sx*sw";
// launch_fp8_gemm's problem (the same arguments and shapes, fp8_gemm_shape_supported) on the
// FP8 wgmma kernel: the same for every m, row and variant, other bits than launch_fp8_gemm.
cudaError_t launch_fp8_gemm_wg(const uint8_t* xq, const float* x_scale, int32_t m,
                               const uint8_t* w, const float* w_scale, int64_t n, int64_t k,
                               const float* bias, float* y, int variant, cudaStream_t stream);
// launch_fp8_quantize_rows into xq (m, k) and x_scale (m), then launch_fp8_gemm_wg.
cudaError_t launch_fp8_linear_wg(const void* x, bool x_bf16, int32_t m, const uint8_t* w,
                                 const float* w_scale, int64_t n, int64_t k, const float* bias,
                                 float* y, uint8_t* xq, float* x_scale, int variant,
                                 cudaStream_t stream);
// FP8 KV cache [n_slots, n_kv_heads * head_dim] E4M3 codes ← e4m3(k/v (n_tokens, n_kv_heads *
// head_dim) fp32 / scale[h]) at slots, h = the element's KV head; k_scale, v_scale
// (n_kv_heads): this layer's fixed scales. Each value rounded once.
cudaError_t launch_kv_append_fp8(const float* k, const float* v, const int32_t* slots,
                                 int32_t n_tokens, int32_t n_kv_heads, int32_t head_dim,
                                 int64_t n_slots, const float* k_scale, const float* v_scale,
                                 uint8_t* cache_k, uint8_t* cache_v, cudaStream_t stream);
// out (n, n_kv_heads * head_dim) fp32 = dec(cache[slots[t]]) · scale[h] (NaN rows for slots
// outside the cache): the dequantizing read of an FP8 cache.
cudaError_t launch_kv_read_fp8(const uint8_t* cache, const float* scale, const int32_t* slots,
                               int32_t n, int32_t n_kv_heads, int32_t head_dim, int64_t n_slots,
                               float* out, cudaStream_t stream);

// ---- attention.cu --------------------------------------------------------------------
struct AttentionArgs {
  const float* q = nullptr;        // (n_tokens, n_heads, head_dim)
  const float* k_cache = nullptr;  // [n_blocks, block_size, n_kv_heads, head_dim] fp32 KV
  const float* v_cache = nullptr;
  const uint16_t* k_bf16 = nullptr;  // the same layout in bf16 (attention_tc.cu)
  const uint16_t* v_bf16 = nullptr;
  // The same layout in E4M3 codes (an FP8 cache; attention_tc.cu's packed CTA only, which
  // loads each value as bf16(dec(code) · scale[h]) into its bf16 tiles), k_scale / v_scale
  // (n_kv_heads) the layer's per-head scales. Set instead of k_bf16 / v_bf16.
  const uint8_t* k_fp8 = nullptr;
  const uint8_t* v_fp8 = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const int32_t* positions = nullptr;     // (n_tokens)
  const int32_t* seq_of_token = nullptr;  // (n_tokens)
  const int32_t* block_tables = nullptr;  // (n_seqs, max_blocks)
  float* out = nullptr;                   // (n_tokens, n_heads, head_dim)
  // attention_tc.cu only: when set, out is not written and this gets the same values rounded
  // to bf16 (nearest even): the o projection's GEMM input (Ops::attention_rounded).
  __nv_bfloat16* out_bf16 = nullptr;
  int32_t n_tokens = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int32_t block_size = 0, max_blocks = 0, n_blocks = 0;
  float scale = 1.0f;
  // attention_tc.cu's decode schedule only: its kernels (and the merge) are launched with
  // programmatic dependent launch (pdl.cuh; the same bits).
  bool pdl = false;
};
// Floats of split-KV scratch a call may use (0 when it runs unsplit).
size_t attention_scratch_floats(const AttentionArgs& a, int force_split);
// Paged causal GQA attention; scratch must hold attention_scratch_floats(a) floats.
// force_split: -1 = choose by grid size, 0 = every split in one block, 1 = a block per split
// (tests use it to show both placements give the same bits).
cudaError_t launch_attention(const AttentionArgs& a, float* scratch, int force_split,
                             cudaStream_t stream);
bool attention_head_dim_supported(int32_t head_dim);

// ---- attention_tc.cu, attention_tc_decode*.cu, attention_tc_shared.cu, attention_wg.cu ----
// The tensor-core kernels over a bf16 cache (a.k_bf16/v_bf16): head_dim 16, 32, 64 or 128 and
// n_heads / n_kv_heads ≤ 64 (attention_tc_supported, kernels/attention_plan.h). Same contract as
// launch_attention (a row's bits depend only on its q, its position and the KV values), with its
// own fixed grid: tiles of 64 positions, splits of 256 (attention_tc_common.cuh). Which kernel
// runs a step, with which CTA and split placement, is the planner's (plan_attention); every
// plan gives the same bits. scratch: plan.scratch_floats floats.
AttentionStepShape attention_step_shape(const AttentionArgs& a, int n_seqs);
cudaError_t launch_attention_tc(const AttentionArgs& a, const AttentionPlan& plan, float* scratch,
                                cudaStream_t stream);
// The kernels themselves (launch_attention_tc calls them for their plans):
// the decode warps (plan.kernel kDecodeWarps: plan.transposed, ring and grid);
cudaError_t launch_attention_tc_decode(const AttentionArgs& a, float* scratch,
                                       const AttentionPlan& plan, cudaStream_t stream);
// the warpgroup CTA (attention_wg.cu): attention_tc's CTA of 4 warps × 16 rows (tq tokens, a
// ring of 3 K/V tiles, the fast path; Q from shared memory at head_dim 64) with the products
// on wgmma; head_dim 64 or 128. The same bits.
cudaError_t launch_attention_wg(const AttentionArgs& a, int tq, float* scratch, bool split,
                                cudaStream_t stream);

// ---- kv_cache.cu ---------------------------------------------------------------------
// cache_k/v [n_slots, row] bf16 ← round-to-nearest-even(k/v (n_tokens, row) fp32) at slots:
// the one rounding of K/V (attention reads only the cache, so fresh and cached KV agree).
cudaError_t launch_kv_append_bf16(const float* k, const float* v, const int32_t* slots,
                                  int32_t n_tokens, int64_t row, int64_t n_slots,
                                  uint16_t* cache_k, uint16_t* cache_v, cudaStream_t stream);

// ---- sampling.cu ---------------------------------------------------------------------
// out[r] = the CPU sampler's result (kernels/sampling/sampler.h) for row r of logits
// (rows, vocab) fp32 with params[r], bit for bit (token, logprob, top logprobs). params (rows)
// and out (rows) are device memory. A row with a NaN/+inf or only -inf logits gets a non-kOk
// status; token -1 or n_top -1 would mean an internal selection failure. Params must be valid
// (SampleRowParams::validate) — the launcher does not check them. A row is spread over
// blocks_per_row blocks in the full-vocabulary passes; no setting changes a bit.
struct SampleRowsConfig {
  int blocks_per_row = 0;       // 0: chosen from the batch and the SM count; > 0: forced (tests)
  int candidate_capacity = -1;  // tokens a row's lists hold: -1 the default; 0 none (tests:
                                // every boundary searched over the whole row by one block)
};
struct SampleRowsPlan {
  int blocks_per_row = 1;
  int cand_capacity = 0;
  int lp_capacity = 0;
  size_t scratch_bytes = 0;  // device scratch that launch_sample_rows needs (256-aligned)
  // Benchmarks and tests: 6 events recorded before pass 1 and after each of the 5 passes
  // (sampling.cu; pass 1 is empty when it runs fused into pass 2), else nullptr.
  cudaEvent_t* pass_events = nullptr;
};
SampleRowsPlan plan_sample_rows(int32_t rows, int32_t vocab, const SampleRowsConfig& config,
                                int sm_count);
// scratch: plan.scratch_bytes of device memory (any content; the first pass resets it).
cudaError_t launch_sample_rows(const float* logits, int32_t rows, int32_t vocab,
                               const SampleRowParams* params, SampleRowResult* out,
                               const SampleRowsPlan& plan, void* scratch, cudaStream_t stream);

// ---- token_mask.cu -------------------------------------------------------------------
// The device path of Ops::sample_rows_masked (masked_sampling.h).
// out (rows, vocab) = logits with every id outside row r's mask at -inf: row r's mask is
// words + mask_of_row[r] * ((vocab + 31) / 32) (bit id % 32 of word id / 32), or none (a plain
// copy) when mask_of_row[r] < 0. Each element is written once from its own input: no
// arithmetic, so the bits are the input's or -inf.
cudaError_t launch_mask_rows(const float* logits, int32_t rows, int32_t vocab,
                             const int32_t* mask_of_row, const uint32_t* words, float* out,
                             cudaStream_t stream);

// The scoring rows that follow a masked draw: out[r] = a score_token row (temperature 0, filters
// off, the Philox counter of params[r]) for the token drawn[r] (score_token -1 when drawn[r]
// has no token), with params[r].n_logprobs top logprobs where mask_of_row[r] >= 0 and none
// elsewhere (an unmasked row's result is the draw's own).
cudaError_t launch_scoring_params(const SampleRowParams* params, const SampleRowResult* drawn,
                                  const int32_t* mask_of_row, int32_t rows, SampleRowParams* out,
                                  cudaStream_t stream);

}  // namespace detllm::kernels::cuda
