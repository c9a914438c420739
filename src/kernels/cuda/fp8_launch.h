// Launchers of the FP8 kernels added after cuda_kernels.h's (kept apart so that a new one does
// not recompile every .cu file). Device pointers; shapes in comments.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace detllm::kernels::cuda {

// launch_fp8_quantize_rows (cuda_kernels.h) with a matrix's activation parameters: params
// (device memory) nullptr — the dynamic per-row scale — or {input_scale, act_bound}
// (kernels/fp8_device_matrix.h): input_scale > 0 is every row's scale (q = e4m3(x / input_scale),
// scale[r] = input_scale); else amax capped at act_bound when > 0, scale = amax / 448 (1 when 0).
// Row-local either way (kernels/ref/fp8_linear.h fp8_activation_scale is the rule). pdl: launched
// with programmatic dependent launch (pdl.cuh), the same bits.
cudaError_t launch_fp8_quantize_rows_params(const void* x, bool x_bf16, int32_t m, int64_t k,
                                            const float* params, uint8_t* q, float* scale,
                                            cudaStream_t stream, bool pdl = false);

// Where a producer of a GEMM input also writes the input's per-token FP8 form: codes (n, k)
// E4M3, scale (n), and the reading matrix's activation parameters (params as above).
struct Fp8RowsOut {
  uint8_t* codes = nullptr;
  float* scale = nullptr;
  const float* params = nullptr;
};

// launch_add_rmsnorm (cuda_kernels.h) that also writes q: the codes and scales that
// launch_fp8_quantize_rows_params(out, bf16, n, dim, q.params, …) gives, bit for bit, without
// its launch (fused.cu).
cudaError_t launch_add_rmsnorm_fp8(float* x, const float* y, const float* w, int32_t n,
                                   int32_t dim, float eps, __nv_bfloat16* out,
                                   const Fp8RowsOut& q, cudaStream_t stream, bool pdl = false,
                                   int row_regs = -1);
// launch_silu_mul_rows (cuda_kernels.h) that also writes q, as above: one block a row.
cudaError_t launch_silu_mul_rows_fp8(const float* gate_up, int32_t n, int32_t ffn,
                                     __nv_bfloat16* out, const Fp8RowsOut& q,
                                     cudaStream_t stream, bool pdl = false);

// Each row of x (m, k) quantized per 128-column group (kF8E4M3G128's activations, DeepSeek-V3's
// act_quant): group g = columns [128 g, 128 g + 128), the last one partial, gets
// launch_fp8_quantize_rows_params' rule on its own — scale[r · ⌈k / 128⌉ + g] and
// q = e4m3(x / that scale). Row-local (kernels/ref/fp8_linear.h
// fp8_quantize_activation_groups is the rule).
cudaError_t launch_fp8_quantize_groups_params(const void* x, bool x_bf16, int32_t m, int64_t k,
                                              const float* params, uint8_t* q, float* scale,
                                              cudaStream_t stream);

// The FP8 wgmma GEMM on 128-column block weight scales (fp8_gemm_wg.cuh, WgScales): w_scale
// (n, ⌈k / 128⌉); x_scale (m) with activations per token (kF8E4M3B128:
// acc += P_b · s_w[c, b], y = acc · s_x[r]) or, with group_activations, (m, ⌈k / 128⌉)
// (kF8E4M3G128: acc += (P_b · s_x[r, b]) · s_w[c, b], y = acc), then + bias. The same wgmmas
// and promotion blocks as launch_fp8_gemm_wg; the same bits for every m, row and variant
// (0: 64-row tiles, 1: 128-row tiles; -1: chosen from m).
inline constexpr int kFp8GemmWgBlockVariants = 2;
inline constexpr const char* kFp8GemmWgB128NumericsRule =
    "wgmma-m64n128k32-e4m3;promote=128;+(P*sw)-fp32-asc;*sx";
inline constexpr const char* kFp8GemmWgG128NumericsRule =
    "wgmma-m64n128k32-e4m3;promote=128;+((P*sx)*sw)-fp32-asc";
cudaError_t launch_fp8_gemm_wg_blocks(const uint8_t* xq, const float* x_scale, int32_t m,
                                      const uint8_t* w, const float* w_scale, int64_t n,
                                      int64_t k, bool group_activations, const float* bias,
                                      float* y, int variant, cudaStream_t stream);

// y (m, n) row-major ← (y · x_scale[r]) · w_scale[c], elementwise (fp32 round to nearest): the
// outer scales of an FP8 product computed unscaled (Fp8LtGemm where cuBLASLt has no
// outer-vector scales).
cudaError_t launch_fp8_scale_outer(float* y, const float* x_scale, const float* w_scale,
                                   int32_t m, int64_t n, cudaStream_t stream);

// The FP8 wgmma GEMM with k cut in a fixed number of runs (fp8_gemm_wg_split.cuh): k's tiles of
// 128 in ⌈tiles / S'⌉-tile runs (S' = fp8_gemm_wg_split_runs(k, splits) ≤ splits, none
// empty), each run's chain that of launch_fp8_gemm_wg, the runs added in ascending order, then
// the same epilogue. A numerics of its own for S' > 1 (kFp8GemmWgSplitNumericsRule + S'); S' = 1
// gives launch_fp8_gemm_wg's bits. The split must be chosen from the shape, never from m: every
// variant and every m gives the same bits. Variants 0 and 3, the small-m schedule: the runs in
// CTAs of their own, their chains in `workspace` (fp8_gemm_wg_split_workspace floats), then
// folded — in 0 by the last CTA of each output tile to finish, which adds the tile's chains in
// ascending order (needs tile_counts: fp8_gemm_wg_split_tiles(m, n) words, zero before the
// first launch; each launch leaves them zero; one launch at a time on them), in 3 by a second,
// combining kernel. 1, 2: the runs one after the other in each CTA (64- and 128-row tiles).
// 4: the same as 2 with the tiles loaded by the TMA unit and warp-specialised roles
// (fp8_gemm_wg_ws.cuh). -1: for m ≤ kFp8GemmWgSplitCtaMaxM 3 with the workspace (0 for one run
// with tile_counts: its chain is the result, written at once), else 1; above, 4 (the fastest
// measured of each; docs/perf.md "FP8"). What the per-channel FP8
// linears of a served model run, S from fp8_gemm_wg_auto_splits. pdl: variants 0–3 launched
// with programmatic dependent launch (pdl.cuh; decode steps): the first weight tiles in flight
// before the previous kernel ends, the same bits (variant 4 ignores it).
inline constexpr int kFp8GemmWgSplitVariants = 5;
inline constexpr int32_t kFp8GemmWgSplitCtaMaxM = 64;
inline constexpr const char* kFp8GemmWgSplitNumericsRule =
    "wgmma-m64n128k32-e4m3;promote=128;fp32-asc;runs-asc;*sx*sw";
int32_t fp8_gemm_wg_split_runs(int64_t k, int splits);
// The split count the per-shape rule gives a weight of n rows on a device of `sms` SMs: as
// many runs as the small-m schedule's CTAs (⌈n / 128⌉ a run, one an SM: its ring takes 145 KB
// of shared memory) fit in one wave — ⌊sms / ⌈n / 128⌉⌋ — at most kFp8GemmWgSplitAutoMax; 1
// where the column blocks alone fill the SMs. One more run would start a second wave of a few
// CTAs, each with as much k to stream as the first wave's. A function of the shape and the
// device, never of m (CudaOptions::fp8_wg_splits = -1).
inline constexpr int kFp8GemmWgSplitAutoMax = 8;
int fp8_gemm_wg_auto_splits(int64_t n, int64_t k, int sms);
size_t fp8_gemm_wg_split_workspace(int32_t m, int64_t n, int64_t k, int splits);
size_t fp8_gemm_wg_split_tiles(int32_t m, int64_t n);
cudaError_t launch_fp8_gemm_wg_split(const uint8_t* xq, const float* x_scale, int32_t m,
                                     const uint8_t* w, const float* w_scale, int64_t n, int64_t k,
                                     const float* bias, float* y, int splits, float* workspace,
                                     size_t workspace_floats, int variant, cudaStream_t stream,
                                     unsigned* tile_counts = nullptr, bool pdl = false);

}  // namespace detllm::kernels::cuda
