// The FP8 GEMM on Hopper's FP8 warpgroup MMA (wgmma m64n128k32 e4m3·e4m3 → f32), the kernel
// template: fp8_gemm_wg.cu instantiates the library's tiles, the test build's negative control
// (tests/cuda/fp8_test_kernels.cu) one with a promotion interval chosen from m.
//   y (m, n) = ((Σ_k dec(xq[m,k])·dec(w[n,k])) · x_scale[m]) · w_scale[n] (+ bias[n])
// — the formula of fp8_gemm.cuh, with other bits: the Σ is made differently.
//
// The Σ. The FP8 wgmma does not accumulate in fp32: its accumulator keeps about 14 significant
// bits (DeepSeek-V3's report: "limited to retaining around 14 bits" on H800; SageAttention2
// measured the same accumulator as an FP22 format, 1 sign, 8 exponent, 13 mantissa bits), so a
// long chain of them loses the small products. As in DeepSeek-V3, the chain is cut every
// 128 k (4 wgmma k32 steps, kFp8WgPromoteK): each block of 128 k starts from zero in the
// wgmma accumulator (scale-d = 0 on its first step), and when its 4 steps are done the
// partial sum is added in fp32 (one __fadd_rn) to the element's fp32 sum, blocks in ascending
// k. A last block past k reads zero-filled codes (0·0 adds nothing).
//
// Why a row's bits never depend on m. Element (r, c) is made by the same instructions on the
// same values whatever m and the tile: the same four m64n128k32 wgmmas on row r's and
// column c's codes for each 128-k block (the block boundaries are multiples of 128 of k, the
// promotion interval is the k tile, for every configuration), then the same fp32 adds in the
// same order, then the epilogue of fp8_gemm.cuh. Tiles differ only in BM (64 or 128 rows: one
// or two consumer warpgroups) and pipeline depth, which move rows between warpgroups and
// blocks. ONE instruction shape, n128, for every tile: inside a wgmma the hardware's order of
// additions is not documented, and an n64 or n256 form could in principle sum a column's
// products differently, so no configuration uses another. Rows past m are zero-filled and an
// MMA's output element depends on its own row and column alone (the tests check every m
// 1…300 and the plan's edges against the largest batch).
//
// Not the bits of the mma.sync FP8 GEMM (fp8_gemm.cuh: f16 HMMA chains with fp32
// accumulation, no promotion blocks): the two kernels are two numerics rules, never switched
// between by m (docs/cuda.md, "FP8 (E4M3) kernels").
//
// Block scales (WgScales; DeepSeek-V3's 128×128 weight blocks, kernels/ref/fp8_linear.h). The
// promotion block is the scale block: the same four wgmmas give each block's partial sum P_b,
// and the promotion applies the block's scales before its fp32 add, in ascending b:
//   kBlock (kF8E4M3B128: one weight scale a 128-column block, activations per token):
//     acc += P_b · s_w[c, b];  y = acc · s_x[r] (+ bias)
//   kBlockGroup (kF8E4M3G128: activations per token and 128-column group too):
//     acc += (P_b · s_x[r, b]) · s_w[c, b];  y = acc (+ bias)
// — the reference's formulas, each product and sum one fp32 rounding (__fmul_rn / __fadd_rn,
// never contracted). The scales are per element (row r's, column c's), so the argument above
// holds unchanged: a row's bits never depend on m.
//
// Staging: cp.async 16-byte copies into a STAGES-deep ring of k tiles (128 bytes a row = one
// 128-byte swizzle atom row, chunks XORed with row % 8: the layout wgmma_desc_sw128 names);
// every thread loads, both operands K-major (the only major-ness FP8 wgmma takes).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm.cuh"
#include "kernels/cuda/mma_ptx.cuh"

namespace detllm::kernels::cuda::ptx {

// The 64 fp32 accumulator operands of an m64n128 wgmma, d[j][e] = register 4j + e (%0…%63).
#define DETLLM_WGMMA_D64_REGS \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
  "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
  "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
  "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
#define DETLLM_WGMMA_D64(d) \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
  "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
  "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
  "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
  "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
  "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
  "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
  "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), \
  "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), \
  "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
  "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), \
  "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
  "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), \
  "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), \
  "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
  "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])

// d (64×128 fp32 over the warpgroup; per warp its 16 rows in the m16n8 C layout, d[j] = n8
// tile j) = (accumulate ? d : 0) + a (64×32 E4M3, K-major at descriptor `a`) · b (32×128
// E4M3, K-major at descriptor `b`). The FP8 wgmma: its own accumulator precision inside the
// instruction (above: why the kernel promotes every 4 of them to fp32 registers). Beside the
// bf16 forms of mma_ptx.cuh, in its style; here because this kernel is its only user.
// Every warp of the warpgroup must issue it (after wgmma_fence; complete at wgmma_wait0).
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[16][4], uint64_t a, uint64_t b,
                                                      uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      DETLLM_WGMMA_D64_REGS
      "%64, %65, p, 1, 1;\n}\n"
      : DETLLM_WGMMA_D64(d)
      : "l"(a), "l"(b), "r"(accumulate));
}

#undef DETLLM_WGMMA_D64
#undef DETLLM_WGMMA_D64_REGS

}  // namespace detllm::kernels::cuda::ptx

namespace detllm::kernels::cuda::fp8 {

// The promotion interval in k (4 k32 wgmmas): part of the numerics (kFp8GemmWgNumericsRule).
inline constexpr int kFp8WgPromoteK = 128;

// Which scales the promotion and the epilogue apply (above): per channel (x_scale (m), w_scale
// (n)), or per 128-column block (w_scale (n, scale_blocks)) with activations per token
// (x_scale (m)) or per token and group (x_scale (m, scale_blocks)).
enum class WgScales : uint8_t { kChannel, kBlock, kBlockGroup };

// BM rows (64 per consumer warpgroup) × 128 columns a block, k tiles of 128 bytes, a ring of
// STAGES tiles. OVERLAP: a k tile's wgmmas run while the previous block's partial sum is
// added (two partial accumulators, in turn; the same adds in the same order, so the same
// bits). PROMOTE_TILES (test build only ≠ 1): k tiles per promotion block.
template <int BM_, int STAGES_, bool OVERLAP_ = false>
struct WgCfg {
  static constexpr int BM = BM_, BN = 128, BK = kFp8WgPromoteK, STAGES = STAGES_;
  static constexpr bool OVERLAP = OVERLAP_;
  static constexpr int WGS = BM / 64;
  static constexpr int kThreads = WGS * 128;
  static constexpr int A_BYTES = BM * BK;
  static constexpr int STAGE_BYTES = (BM + BN) * BK;
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024;  // + the 1024 alignment slack
  static_assert(BM % 64 == 0 && BK == 128, "64-row warpgroups, one swizzle row a k tile");
  static_assert(STAGES >= (OVERLAP ? 3 : 2), "a ring of two tiles at least (three: OVERLAP)");
};

// Stage rows [r0, r1) of one k tile into `stage` (1024-aligned): rows 0…BM−1 are the
// activations', BM…BM+BN−1 the weights'; rows of 128 bytes, chunk c of row r at c ^ (r % 8).
// Rows past m or n and chunks past k are zero-filled.
template <class C>
__device__ __forceinline__ void wg_load_tile_rows(const GemmParams& p, unsigned char* stage,
                                                  int tile, int m0, int n0, int r0, int r1) {
  const int k0 = tile * C::BK;
  for (int c = threadIdx.x; c < (r1 - r0) * 8; c += C::kThreads) {
    const int r = r0 + (c >> 3), ch = c & 7;
    const bool is_a = r < C::BM;
    const int gr = is_a ? m0 + r : n0 + (r - C::BM);
    const int gk = k0 + ch * 16;
    const bool ok = (is_a ? gr < p.m : gr < p.n) && gk < p.k;
    const uint8_t* base = is_a ? p.x : p.w;
    ptx::cp_async16_zfill(stage + r * 128 + ((ch ^ (r & 7)) << 4),
                          ok ? base + static_cast<int64_t>(gr) * p.k + gk : base, ok ? 16 : 0);
  }
}

// The whole k tile: activation and weight rows.
template <class C>
__device__ __forceinline__ void wg_load_tile(const GemmParams& p, unsigned char* stage, int tile,
                                             int m0, int n0) {
  wg_load_tile_rows<C>(p, stage, tile, m0, n0, 0, C::BM + C::BN);
}

// The four k32 wgmmas of k tile `t` (ring slot t % STAGES) into `part`, from zero when `fresh`;
// committed as one group, not waited for.
template <class C>
__device__ __forceinline__ void wg_issue_tile(float (&part)[16][4], uint32_t ring_u32, int t,
                                              int wg, bool fresh) {
  const uint32_t a = ring_u32 + (t % C::STAGES) * C::STAGE_BYTES + wg * 64 * C::BK;
  const uint32_t b = ring_u32 + (t % C::STAGES) * C::STAGE_BYTES + C::A_BYTES;
  ptx::wgmma_fence_operands(part);
  ptx::wgmma_fence();
#pragma unroll
  for (int s = 0; s < C::BK / 32; ++s)  // k32 step s: 32 bytes further along the atom row
    ptx::wgmma_m64n128k32_e4m3(part, ptx::wgmma_desc_sw128(a + 32 * s),
                               ptx::wgmma_desc_sw128(b + 32 * s), s > 0 || !fresh ? 1u : 0u);
  ptx::wgmma_commit();
}

__device__ __forceinline__ void wg_promote(float (&acc)[16][4], const float (&part)[16][4]) {
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = __fadd_rn(acc[j][e], part[j][e]);
}

// This thread's scales of promotion block b: w_scale of its 32 columns (j, c2: column
// n0 + 8 j + 2 tq + c2) and, per group, x_scale of its two rows (h: row g + 8 h of its warp's
// 16). Loaded before the block's wgmmas are waited for; 0 outside the m × n output (those
// elements are never stored).
template <WgScales SC>
struct WgBlockScales {
  float w[16][2];
  float x[2];
};
template <class C, WgScales SC>
__device__ __forceinline__ void wg_load_block_scales(const GemmParams& p, int m0, int n0, int wg,
                                                     int b, WgBlockScales<SC>& s) {
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;
  const int nb = p.scale_blocks;
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int c2 = 0; c2 < 2; ++c2) {
      const int col = n0 + j * 8 + 2 * tq + c2;
      s.w[j][c2] = col < p.n ? __ldg(p.w_scale + static_cast<int64_t>(col) * nb + b) : 0.0f;
    }
  if constexpr (SC == WgScales::kBlockGroup) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + wg * 64 + warp * 16 + g + 8 * h;
      s.x[h] = row < p.m ? __ldg(p.x_scale + static_cast<int64_t>(row) * nb + b) : 0.0f;
    }
  }
}

// acc += P_b · s_w (kBlock) or (P_b · s_x) · s_w (kBlockGroup), element by element (d[j][e]:
// row half e / 2, column c2 = e % 2).
template <WgScales SC>
__device__ __forceinline__ void wg_promote_block(float (&acc)[16][4], const float (&part)[16][4],
                                                 const WgBlockScales<SC>& s) {
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float v = part[j][e];
      if constexpr (SC == WgScales::kBlockGroup) v = __fmul_rn(v, s.x[e >> 1]);
      acc[j][e] = __fadd_rn(acc[j][e], __fmul_rn(v, s.w[j][e & 1]));
    }
}

template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// The plain schedule: each k tile's wgmmas are waited for, then added (every PROMOTE_TILES
// tiles and at the last).
template <class C, int PROMOTE_TILES, WgScales SC = WgScales::kChannel>
__device__ __forceinline__ void wg_main_loop_serial(const GemmParams& p, unsigned char* ring,
                                                    uint32_t ring_u32, int m0, int n0, int wg,
                                                    float (&acc)[16][4]) {
  static_assert(SC == WgScales::kChannel || PROMOTE_TILES == 1,
                "block scales: the promotion block is the 128-k scale block");
  const int tiles = (p.k + C::BK - 1) / C::BK;
  float part[16][4];
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < tiles) wg_load_tile<C>(p, ring + s * C::STAGE_BYTES, s, m0, n0);
    ptx::cp_async_commit();
  }
  for (int t = 0; t < tiles; ++t) {
    ptx::cp_async_wait<C::STAGES - 2>();  // this thread's copies of tile t have landed
    ptx::fence_proxy_async_smem();        // and are visible to the warpgroup MMA
    __syncthreads();                      // everyone's; everyone is done with tile t − 1
    const int next = t + C::STAGES - 1;   // into tile t − 1's slot
    if (next < tiles) wg_load_tile<C>(p, ring + (next % C::STAGES) * C::STAGE_BYTES, next, m0, n0);
    ptx::cp_async_commit();
    wg_issue_tile<C>(part, ring_u32, t, wg, t % PROMOTE_TILES == 0);
    if constexpr (SC == WgScales::kChannel) {
      ptx::wgmma_wait0();
      ptx::wgmma_fence_operands(part);
      if (t % PROMOTE_TILES == PROMOTE_TILES - 1 || t == tiles - 1) wg_promote(acc, part);
    } else {
      WgBlockScales<SC> sc;
      wg_load_block_scales<C>(p, m0, n0, wg, t, sc);  // while the wgmmas run
      ptx::wgmma_wait0();
      ptx::wgmma_fence_operands(part);
      wg_promote_block(acc, part, sc);
    }
  }
  ptx::cp_async_wait<0>();
}

// The OVERLAP schedule: tile t's wgmmas are issued into one partial accumulator, then tile
// t − 1's (the other one) is waited for and added. A ring slot is refilled two tiles after it
// was read (its wgmmas are complete by then in every warpgroup: each waited for them before the
// barrier that precedes the refill).
template <class C>
__device__ __forceinline__ void wg_main_loop_overlap(const GemmParams& p, unsigned char* ring,
                                                     uint32_t ring_u32, int m0, int n0, int wg,
                                                     float (&acc)[16][4]) {
  const int tiles = (p.k + C::BK - 1) / C::BK;
  float pa[16][4], pb[16][4];
#pragma unroll
  for (int s = 0; s < C::STAGES - 2; ++s) {
    if (s < tiles) wg_load_tile<C>(p, ring + s * C::STAGE_BYTES, s, m0, n0);
    ptx::cp_async_commit();
  }
  auto step = [&](int t, float (&cur)[16][4], float (&prev)[16][4]) {
    ptx::cp_async_wait<C::STAGES - 3>();  // this thread's copies of tile t have landed
    ptx::fence_proxy_async_smem();        // and are visible to the warpgroup MMA
    __syncthreads();                      // everyone's; tile t − 2's wgmmas are complete
    const int next = t + C::STAGES - 2;   // into tile t − 2's slot
    if (next < tiles) wg_load_tile<C>(p, ring + (next % C::STAGES) * C::STAGE_BYTES, next, m0, n0);
    ptx::cp_async_commit();
    wg_issue_tile<C>(cur, ring_u32, t, wg, true);
    if (t > 0) {
      wgmma_wait<1>();  // tile t − 1's group
      ptx::wgmma_fence_operands(prev);
      wg_promote(acc, prev);
    }
  };
  int t = 0;
  for (; t + 1 < tiles; t += 2) {
    step(t, pa, pb);
    step(t + 1, pb, pa);
  }
  if (t < tiles) step(t, pa, pb);
  ptx::wgmma_wait0();
  if (t < tiles) {
    ptx::wgmma_fence_operands(pa);
    wg_promote(acc, pa);
  } else {
    ptx::wgmma_fence_operands(pb);
    wg_promote(acc, pb);
  }
  ptx::cp_async_wait<0>();
}

// f(row, col, value) for each element of this thread's accumulator inside the m × n output.
template <class C, class F>
__device__ __forceinline__ void wg_each_element(const GemmParams& p, const float (&acc)[16][4],
                                                int m0, int n0, int wg, F&& f) {
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = m0 + wg * 64 + warp * 16 + g + (e >= 2 ? 8 : 0);
      const int col = n0 + j * 8 + 2 * tq + (e & 1);
      if (row < p.m && col < p.n) f(row, col, acc[j][e]);
    }
}

// The epilogue on a whole sum: fp8_gemm.cuh's (· s_x · s_w) per channel; · s_x with block
// weight scales; nothing with group activations (the scales were applied block by block).
template <WgScales SC = WgScales::kChannel>
__device__ __forceinline__ float wg_epilogue(const GemmParams& p, int row, int col, float sum) {
  float v = sum;
  if constexpr (SC == WgScales::kChannel) v = __fmul_rn(__fmul_rn(v, p.x_scale[row]), p.w_scale[col]);
  if constexpr (SC == WgScales::kBlock) v = __fmul_rn(v, p.x_scale[row]);
  if (p.bias != nullptr) v = __fadd_rn(v, p.bias[col]);
  return v;
}

// The k-tile ring at the first 1024-byte boundary of the dynamic shared memory (the 128-byte
// swizzle's atom; WgCfg::SMEM_BYTES holds the slack), as a pointer and a shared address.
struct WgRing {
  unsigned char* ptr;
  uint32_t u32;
};
__device__ __forceinline__ WgRing wg_ring(unsigned char* smem_raw) {
  const uint32_t raw = ptx::smem_u32(smem_raw);
  const uint32_t pad = ((raw + 1023u) & ~1023u) - raw;
  return {smem_raw + pad, raw + pad};
}

template <class C, int PROMOTE_TILES, WgScales SC = WgScales::kChannel>
__global__ void __launch_bounds__(C::kThreads) gemm_wg_kernel(const GemmParams p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const WgRing r = wg_ring(smem_raw);
  unsigned char* ring = r.ptr;
  const uint32_t ring_u32 = r.u32;

  const int wg = threadIdx.x >> 7;
  const int m0 = blockIdx.y * C::BM, n0 = blockIdx.x * C::BN;

  float acc[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;

  if constexpr (C::OVERLAP) {
    static_assert(PROMOTE_TILES == 1, "the overlapped schedule promotes every k tile");
    static_assert(SC == WgScales::kChannel, "block scales: the serial schedule");
    wg_main_loop_overlap<C>(p, ring, ring_u32, m0, n0, wg, acc);
  } else {
    wg_main_loop_serial<C, PROMOTE_TILES, SC>(p, ring, ring_u32, m0, n0, wg, acc);
  }

  wg_each_element<C>(p, acc, m0, n0, wg, [&](int row, int col, float v) {
    p.y[static_cast<int64_t>(row) * p.n + col] = wg_epilogue<SC>(p, row, col, v);
  });
}

template <class C, int PROMOTE_TILES, WgScales SC = WgScales::kChannel>
cudaError_t run_wg(const GemmParams& p, cudaStream_t stream) {
  const dim3 grid((p.n + C::BN - 1) / C::BN, (p.m + C::BM - 1) / C::BM);
  const cudaError_t err = cudaFuncSetAttribute(gemm_wg_kernel<C, PROMOTE_TILES, SC>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               C::SMEM_BYTES);
  if (err != cudaSuccess) return err;
  gemm_wg_kernel<C, PROMOTE_TILES, SC><<<grid, C::kThreads, C::SMEM_BYTES, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda::fp8
