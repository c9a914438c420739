// The FP8 GEMM kernel template (fp8_gemm.cu instantiates the library's tiles; the test build's
// negative control, tests/cuda/fp8_negative_control.cu, instantiates it with its K range cut in
// two). y (m, n) = ((Σ_k dec(xq[m,k])·dec(w[n,k])) · x_scale[m]) · w_scale[n] (+ bias[n]).
//
// The Σ: E4M3 codes are converted exactly to f16 in registers (cvt.rn.f16x2.e4m3x2) and
// multiplied on the tensor cores by mma.sync m16n8k16 f16 with fp32 accumulation — one chain
// per output element, from zero, in ascending k16 steps over the whole K range. That is also
// what ptxas makes of the PTX FP8 MMA (mma.sync m16n8k32 e4m3) on sm_90: two F2FP unpacks per
// operand register and two HMMA.16816.F32 (the FP8 HMMA of Ada and the FP8 wgmma, whose
// accumulator keeps ~22 bits, are not used here). Writing the conversion out fixes which k
// goes into which k16 step, and converts each A fragment once for all of a warp's n tiles.
//
// Why a row's bits never depend on m: the sequence of MMAs that makes y[r, c] — the k16 steps
// in ascending order, each the same f16 values of row r and column c in the same fragment
// places — is the same for every tile shape, every BK and every pipeline depth; tiles only
// choose which rows and columns a warp holds. Rows past m are zero-filled and only ever meet
// themselves in the MMA (an MMA's output element depends on its own row and column alone).
// The epilogue multiplies by the row's and the column's scales in a fixed order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/mma_ptx.cuh"

namespace detllm::kernels::cuda::fp8 {

struct GemmParams {
  const uint8_t* x;        // (m, k) E4M3 codes, rows of k bytes
  const float* x_scale;    // (m); the wgmma kernel's per-group activations: (m, scale_blocks)
  const uint8_t* w;        // (n, k) E4M3 codes
  const float* w_scale;    // (n); the wgmma kernel's block scales: (n, scale_blocks)
  const float* bias;       // (n) or nullptr
  float* y;                // (m, n)
  int32_t m, n, k;         // k % 16 == 0
  int32_t scale_blocks = 0;  // ⌈k / 128⌉ with block scales (fp8_gemm_wg.cuh WgScales), else 0
};

// Block tile BM×BN, k tile BK bytes (= elements), WARPS_M×WARPS_N warps, STAGES-deep cp.async
// pipeline. Shared-memory rows are BK + 16 bytes (ldmatrix rows land on distinct banks).
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct Cfg {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int STAGES = STAGES_;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;
  static constexpr int MT = WTM / 16, NT = WTN / 8;
  static constexpr int LD = BK + 16;
  static constexpr int A_BYTES = BM * LD;
  static constexpr int STAGE_BYTES = (BM + BN) * LD;
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 32 == 0, "tile shapes");
};

// d (16×8 fp32) += a (16×16 f16, row) · b (16×8 f16, col).
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t lo_f16x2(uint32_t four) {
  return e4m3x2_to_f16x2(static_cast<uint16_t>(four & 0xffffu));
}
__device__ __forceinline__ uint32_t hi_f16x2(uint32_t four) {
  return e4m3x2_to_f16x2(static_cast<uint16_t>(four >> 16));
}

template <class C>
__device__ __forceinline__ void load_tile(const GemmParams& p, unsigned char* stage, int tile,
                                          int m0, int n0) {
  const int k0 = tile * C::BK;
  constexpr int CH = C::BK / 16;  // 16-byte chunks a row
  for (int c = threadIdx.x; c < C::BM * CH; c += C::kThreads) {
    const int r = c / CH, kc = (c % CH) * 16;
    const int gr = m0 + r, gk = k0 + kc;
    const bool ok = gr < p.m && gk < p.k;
    ptx::cp_async16_zfill(stage + r * C::LD + kc, ok ? p.x + static_cast<int64_t>(gr) * p.k + gk : p.x,
                          ok ? 16 : 0);
  }
  unsigned char* bs = stage + C::A_BYTES;
  for (int c = threadIdx.x; c < C::BN * CH; c += C::kThreads) {
    const int r = c / CH, kc = (c % CH) * 16;
    const int gn = n0 + r, gk = k0 + kc;
    const bool ok = gn < p.n && gk < p.k;
    ptx::cp_async16_zfill(bs + r * C::LD + kc, ok ? p.w + static_cast<int64_t>(gn) * p.k + gk : p.w,
                          ok ? 16 : 0);
  }
}

// One k tile: BK / 32 groups of 32 bytes, each two k16 MMA steps (bytes [0, 16) then [16, 32)
// of the group). ldmatrix on the byte tile (as b16 pairs) gives the m16n8k32 E4M3 fragments:
// a register holds 4 consecutive codes, bytes 4t…4t+3 of its row (t = lane % 4); its low pair
// becomes f16 k-slots 2t, 2t+1 and its high pair 2t+8, 2t+9 of the same k16 step, in A and B
// alike, so each step multiplies matching k.
template <class C>
__device__ __forceinline__ void compute_stage(const unsigned char* stage, int warp_m, int warp_n,
                                              float (&acc)[C::MT][C::NT][4]) {
  const int lane = threadIdx.x & 31;
  const unsigned char* bs = stage + C::A_BYTES;
#pragma unroll
  for (int kk = 0; kk < C::BK; kk += 32) {
    uint32_t af[C::MT][2][4];  // [mt][k16 step][f16 A fragment]
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt) {
      uint32_t r[4];  // rows g, g + 8 at bytes 4t (r0, r1) and 16 + 4t (r2, r3)
      ptx::ldmatrix_x4(r, stage + (warp_m * C::WTM + mt * 16 + (lane & 15)) * C::LD + kk +
                              (lane >> 4) * 16);
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        af[mt][s][0] = lo_f16x2(r[2 * s]);
        af[mt][s][1] = lo_f16x2(r[2 * s + 1]);
        af[mt][s][2] = hi_f16x2(r[2 * s]);
        af[mt][s][3] = hi_f16x2(r[2 * s + 1]);
      }
    }
#pragma unroll
    for (int nt2 = 0; nt2 < C::NT / 2; ++nt2) {
      uint32_t b[4];  // n tile 2·nt2: bytes 4t (b0), 16 + 4t (b1); n tile 2·nt2 + 1: b2, b3
      const int nrow = warp_n * C::WTN + nt2 * 16 + (lane >> 4) * 8 + (lane & 7);
      ptx::ldmatrix_x4(b, bs + nrow * C::LD + kk + ((lane >> 3) & 1) * 16);
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const uint32_t b00 = lo_f16x2(b[s]), b01 = hi_f16x2(b[s]);
        const uint32_t b10 = lo_f16x2(b[2 + s]), b11 = hi_f16x2(b[2 + s]);
#pragma unroll
        for (int mt = 0; mt < C::MT; ++mt) {
          mma_f16(acc[mt][2 * nt2], af[mt][s], b00, b01);
          mma_f16(acc[mt][2 * nt2 + 1], af[mt][s], b10, b11);
        }
      }
    }
  }
}

// SPLIT_CONTROL (test build only): the K tiles' first half and second half accumulate from zero
// separately and are added at the end — another order, i.e. other bits.
template <class C, bool SPLIT_CONTROL>
__global__ void __launch_bounds__(C::kThreads) gemm_kernel(const GemmParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warp_m = warp / C::WARPS_N, warp_n = warp % C::WARPS_N;
  const int m0 = blockIdx.y * C::BM, n0 = blockIdx.x * C::BN;
  const int tiles = (p.k + C::BK - 1) / C::BK;

  float acc[C::MT][C::NT][4];
  float first[SPLIT_CONTROL ? C::MT : 1][SPLIT_CONTROL ? C::NT : 1][4];
#pragma unroll
  for (int i = 0; i < C::MT; ++i)
#pragma unroll
    for (int j = 0; j < C::NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < tiles) load_tile<C>(p, smem + s * C::STAGE_BYTES, s, m0, n0);
    ptx::cp_async_commit();
  }
  for (int t = 0; t < tiles; ++t) {
    ptx::cp_async_wait<C::STAGES - 2>();
    __syncthreads();
    const int next = t + C::STAGES - 1;
    if (next < tiles) load_tile<C>(p, smem + (next % C::STAGES) * C::STAGE_BYTES, next, m0, n0);
    ptx::cp_async_commit();
    if constexpr (SPLIT_CONTROL) {
      if (t == tiles / 2) {
#pragma unroll
        for (int i = 0; i < C::MT; ++i)
#pragma unroll
          for (int j = 0; j < C::NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              first[i][j][e] = acc[i][j][e];
              acc[i][j][e] = 0.0f;
            }
      }
    }
    compute_stage<C>(smem + (t % C::STAGES) * C::STAGE_BYTES, warp_m, warp_n, acc);
  }
  ptx::cp_async_wait<0>();

  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int i = 0; i < C::MT; ++i)
#pragma unroll
    for (int j = 0; j < C::NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = m0 + warp_m * C::WTM + i * 16 + g + (e >= 2 ? 8 : 0);
        const int col = n0 + warp_n * C::WTN + j * 8 + 2 * tq + (e & 1);
        if (row >= p.m || col >= p.n) continue;
        float v = acc[i][j][e];
        if constexpr (SPLIT_CONTROL) {
          if (tiles > 1) v = __fadd_rn(first[i][j][e], v);
        }
        v = __fmul_rn(__fmul_rn(v, p.x_scale[row]), p.w_scale[col]);
        if (p.bias != nullptr) v = __fadd_rn(v, p.bias[col]);
        p.y[static_cast<int64_t>(row) * p.n + col] = v;
      }
}

template <class C, bool SPLIT_CONTROL>
cudaError_t run(const GemmParams& p, cudaStream_t stream) {
  const dim3 grid((p.n + C::BN - 1) / C::BN, (p.m + C::BM - 1) / C::BM);
  const cudaError_t err = cudaFuncSetAttribute(
      gemm_kernel<C, SPLIT_CONTROL>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
  if (err != cudaSuccess) return err;
  gemm_kernel<C, SPLIT_CONTROL><<<grid, C::kThreads, C::SMEM_BYTES, stream>>>(p);
  return cudaGetLastError();
}

// A linear layer as both FP8 GEMMs run it: the rows quantized (launch_fp8_quantize_rows) into
// xq / x_scale, then `gemm` (launch_fp8_gemm or launch_fp8_gemm_wg) on them.
template <class Gemm>
cudaError_t quantize_then(const void* x, bool x_bf16, int32_t m, const uint8_t* w,
                          const float* w_scale, int64_t n, int64_t k, const float* bias, float* y,
                          uint8_t* xq, float* x_scale, int variant, cudaStream_t stream,
                          Gemm gemm) {
  if (m == 0) return cudaSuccess;
  if (!fp8_gemm_shape_supported(n, k)) return cudaErrorInvalidValue;
  const cudaError_t err = launch_fp8_quantize_rows(x, x_bf16, m, k, xq, x_scale, stream);
  if (err != cudaSuccess) return err;
  return gemm(xq, x_scale, m, w, w_scale, n, k, bias, y, variant, stream);
}

}  // namespace detllm::kernels::cuda::fp8
