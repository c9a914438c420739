// The transposed decode warp: the decode schedule (one warp per token, KV head and run of KV
// splits, each with its own cp.async ring: attention_tc_decode_warp.cuh) with the products
// turned around, for steps whose tokens have n_rep ≤ 8 query heads per KV head.
//
//   scores  Sᵀ = K·Qᵀ    (mma m16n8k16: A = 16 positions × 16 head dims of K, B = Qᵀ, the n8
//                          side = the token's ≤ 8 query heads)
//   softmax on S         (Sᵀ's 8×8 blocks moved to the row layout with movmatrix, 16 bits at a
//                          time: the thread then holds row gq's 16 values of the tile exactly
//                          where the row-layout warp holds them, and softmax_rows runs the same
//                          per-row arithmetic)
//   values  Oᵀ += Vᵀ·Pᵀ  (A = 16 head dims × 16 positions of V by ldmatrix.trans, B = Pᵀ: the
//                          row-layout P's own registers)
//
// Why: in the row layout (S = Q·Kᵀ, attention_tc_decode.cu) the m16 side holds the token's 4
// query heads (Llama-3-8B) and 12 zero rows, so half of every product and of the registers for
// S and O are zeros; here nothing is wasted on the m side, and O at head_dim 128 takes 32
// registers instead of 64. With the registers that frees, quarter-tile chunks (16 positions)
// run 16 warps an SM on the same 209 KB of shared memory.
//
// The bits are the row-layout warp's: an m16n8k16 product with A and B exchanged gives the
// transposed result bit for bit, with and without a nonzero C (CudaMmaSwap: 0 of 33,554,432
// elements differ either way on the H200; docs/cuda.md, "Decode: the transposed warp"); every
// S and O element keeps its chain (k-steps ascending from zero); the softmax of a row is
// softmax_rows' in the same column order; the factors c reach O's columns by shuffles (moves);
// the partials are store_partial's layout and merge in the same merge_row.
// The tests run it against every other schedule (CudaAttentionTc.BitIdenticalAcross…).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/attention_tc_common.cuh"
#include "kernels/cuda/attention_tc_decode_nq.h"
#include "kernels/cuda/attention_tc_decode_warp.cuh"

namespace detllm::kernels::cuda {
namespace {

using namespace tc;

constexpr int kPosTiles = kKvTile / 16;  // m16 position tiles of Sᵀ = P·V k-steps of a tile

// One split's running state of the thread's row gq (m, l) and of Oᵀ: o[D][e] = head dim
// 16D + gq, row 2cq + e; o[D][2 + e] = head dim 16D + 8 + gq, row 2cq + e.
template <int HD>
struct SplitStateT {
  float m[1], l[1];
  float o[HD / 16][4];
  __device__ __forceinline__ void reset() {
    m[0] = -INFINITY;
    l[0] = 0.0f;
#pragma unroll
    for (int dt = 0; dt < HD / 16; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  }
};

// Qᵀ's B fragments (k = head dims, n = the warp's rows) of row gq, rounded to bf16: [kk][0]
// head dims 16kk + 2cq and + 1, [kk][1] 16kk + 8 + 2cq and + 1 — load_q_fragments' [kk][0] and
// [kk][2]. q nullptr: no row there, zeros.
template <int HD>
__device__ __forceinline__ void load_q_columns(uint32_t (&qb)[HD / 16][2], const float* q, int cq) {
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) q_row_pairs(q, kk, cq, qb[kk][0], qb[kk][1]);
}

// Sᵀ of the tile's position tiles [I0, I0 + IN) (16 positions each), k-steps ascending from
// zero; `kb` holds their K rows (row 0 = position 16·I0 of the tile). sT[i][h·2 + e]: position
// 16i + 8h + gq, row 2cq + e.
template <int HD, int I0, int IN>
__device__ __forceinline__ void qk_t_part(const __nv_bfloat16* kb, const uint32_t (&qb)[HD / 16][2],
                                          float (&sT)[kPosTiles][4]) {
  constexpr int LD = kLd<HD>;
  static_assert(I0 + IN <= kPosTiles, "position tiles of the tile");
  const int lane = threadIdx.x & 31;
  const int ldm = lane >> 3, ldr = lane & 7;
#pragma unroll
  for (int i = I0; i < I0 + IN; ++i) sT[i][0] = sT[i][1] = sT[i][2] = sT[i][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
    for (int i = I0; i < I0 + IN; ++i) {
      // A: matrices (positions 0–7 | 8–15) × (head dims 0–7 | 8–15) of the k-step.
      uint32_t r[4];
      ldmatrix_x4(r, kb + ((i - I0) * 16 + (ldm & 1) * 8 + ldr) * LD + kk * 16 + (ldm >> 1) * 8);
      mma_bf16(sT[i], r, qb[kk][0], qb[kk][1]);
    }
  }
}

// The 8×8 fp32 block (x0, x1) of lane (gq, cq) — row gq, columns 2cq and 2cq + 1 — transposed
// in place across the warp, bit-exactly: the high and the low 16 bits each by one movmatrix.
__device__ __forceinline__ void transpose_8x8_f32(float& x0, float& x1) {
  const uint32_t u0 = __float_as_uint(x0), u1 = __float_as_uint(x1);
  const uint32_t hi = ptx::movmatrix_trans(__byte_perm(u0, u1, 0x7632));
  const uint32_t lo = ptx::movmatrix_trans(__byte_perm(u0, u1, 0x5410));
  x0 = __uint_as_float(__byte_perm(lo, hi, 0x5410));
  x1 = __uint_as_float(__byte_perm(lo, hi, 0x7632));
}

// Sᵀ to the row layout of softmax_rows<·, 1>: s[nt][e] = row gq, position 8nt + 2cq + e.
__device__ __forceinline__ void transpose_scores(float (&sT)[kPosTiles][4],
                                                 float (&s)[kKvTile / 8][2]) {
#pragma unroll
  for (int i = 0; i < kPosTiles; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float x0 = sT[i][2 * h], x1 = sT[i][2 * h + 1];
      transpose_8x8_f32(x0, x1);
      s[2 * i + h][0] = x0;
      s[2 * i + h][1] = x1;
    }
}

// Oᵀ's rescale by the rows' factors (c: row gq's; the thread's columns are rows 2cq and
// 2cq + 1, whose factors lanes 8cq and 8cq + 4 hold). The same skip as rescale_o: x·1 = x.
template <int HD>
__device__ __forceinline__ void rescale_ot(SplitStateT<HD>& st, float c) {
  if (__all_sync(kFull, c == 1.0f)) return;
  const int cq = threadIdx.x & 3;
  const float c0 = __shfl_sync(kFull, c, 8 * cq), c1 = __shfl_sync(kFull, c, 8 * cq + 4);
#pragma unroll
  for (int dt = 0; dt < HD / 16; ++dt) {
    st.o[dt][0] = __fmul_rn(st.o[dt][0], c0);
    st.o[dt][1] = __fmul_rn(st.o[dt][1], c1);
    st.o[dt][2] = __fmul_rn(st.o[dt][2], c0);
    st.o[dt][3] = __fmul_rn(st.o[dt][3], c1);
  }
}

// Oᵀ += Vᵀ·Pᵀ for the tile's k-steps [J0, J0 + JN) (16 positions each, ascending); `vb` holds
// their V rows (row 0 = position 16·J0 of the tile). Pᵀ's B fragment of k-step j is P's A
// fragment [0] and [2] of the row layout (p_fragment), rounded to bf16 the same way.
template <int HD, int J0, int JN>
__device__ __forceinline__ void values_t_part(const __nv_bfloat16* vb,
                                              const float (&s)[kKvTile / 8][2],
                                              SplitStateT<HD>& st) {
  constexpr int LD = kLd<HD>;
  static_assert(J0 + JN <= kPosTiles, "k-steps of the tile");
  const int lane = threadIdx.x & 31;
  const int ldm = lane >> 3, ldr = lane & 7;
#pragma unroll
  for (int j = J0; j < J0 + JN; ++j) {
    const uint32_t b0 = pack_bf16(s[2 * j][0], s[2 * j][1]);
    const uint32_t b1 = pack_bf16(s[2 * j + 1][0], s[2 * j + 1][1]);
#pragma unroll
    for (int dt = 0; dt < HD / 16; ++dt) {
      // A = Vᵀ: matrices (head dims 0–7 | 8–15) × (positions 0–7 | 8–15) of the k-step.
      uint32_t r[4];
      ldmatrix_x4_trans(r,
                        vb + ((j - J0) * 16 + (ldm >> 1) * 8 + ldr) * LD + dt * 16 + (ldm & 1) * 8);
      mma_bf16(st.o[dt], r, b0, b1);
    }
  }
}

// Split z's state of the warp's rows into the partials (store_partial's layout): row0 is the
// step row of the warp's row 0; rows ≥ n_rep are not there.
template <int HD>
__device__ __forceinline__ void store_partial_t(float* partials, int64_t row0, int n_rep,
                                                int max_splits, int z, const SplitStateT<HD>& st) {
  const int lane = threadIdx.x & 31;
  const int gq = lane >> 2, cq = lane & 3;
  if (cq == 0 && gq < n_rep) {
    float* part = partials + ((row0 + gq) * max_splits + z) * (HD + 2);
    part[0] = st.m[0];
    part[1] = st.l[0];
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int r = 2 * cq + e;
    if (r >= n_rep) continue;
    float* part = partials + ((row0 + r) * max_splits + z) * (HD + 2) + 2;
#pragma unroll
    for (int dt = 0; dt < HD / 16; ++dt) {
      part[dt * 16 + gq] = st.o[dt][e];
      part[dt * 16 + 8 + gq] = st.o[dt][2 + e];
    }
  }
}

// grid attention_decode_grid (the plan), block W warps (kDecWarps<NBUF, ROWS>: the CTA's ring budget, or
// one warp a CTA with a deep ring of its own); warp w runs decode_item(w). A tile's chunks:
// PARTS of K (Sᵀ's position tiles, PER each), then PARTS of V (PER k-steps).
template <int HD, int NBUF, int PARTS, int W, bool KV8>
__global__ void __launch_bounds__(W * 32)
    attention_tc_decode_nq_kernel(const AttentionArgs a, float scale_log2, float* partials,
                                  int max_splits, int splits_per_warp, int n_zc) {
  constexpr int ROWS = kKvTile / PARTS;
  constexpr int PER = kPosTiles / PARTS;
  using Ring = DecodeRing<HD, NBUF, ROWS, kDecDefaultPrefetch, KV8>;
  constexpr int CPT = Ring::CPT;
  static_assert(CPT == 2 * PARTS, "K then V chunks");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const DecodeItem it = start_decode_warp<W>(a, splits_per_warp, n_zc);
  const int lane = threadIdx.x & 31, gq = lane >> 2, cq = lane & 3;
  if (!it.ok) return;  // warp-uniform
  Ring ring(smem_raw, a, it, lane);

  // The thread's row gq (softmax) = query head g·n_rep + gq of token t.
  const int n_rep = a.n_heads / a.n_kv_heads;
  const int64_t row0 = static_cast<int64_t>(it.t) * a.n_heads + it.g * n_rep;
  const int lim[1] = {gq < n_rep ? it.pos : -1};
  uint32_t qb[HD / 16][2];
  load_q_columns<HD>(qb, gq < n_rep ? a.q + (row0 + gq) * HD : nullptr, cq);

  SplitStateT<HD> st;
  float sT[kPosTiles][4];
  float s[kKvTile / 8][2];
  for (int f = 0; f < it.n_tiles; ++f) {
    const int start = it.range_begin + f * kKvTile;
    if (start % kTcSplit == 0) st.reset();  // a split starts: its state from zero
    static_for<0, PARTS>([&](auto p) {
      constexpr int P = decltype(p)::value;
      qk_t_part<HD, P * PER, PER>(ring.ready(CPT * f + P), qb, sT);
      __syncwarp();  // each buffer is free for the chunk NBUF − 1 after it
    });
    transpose_scores(sT, s);
    float c[1];
    softmax_rows<true, 1>(start, lim, scale_log2, st.m, st.l, s, c);
    rescale_ot<HD>(st, c[0]);
    static_for<0, PARTS>([&](auto p) {
      constexpr int P = decltype(p)::value;
      values_t_part<HD, P * PER, PER>(ring.ready(CPT * f + PARTS + P), s, st);
      __syncwarp();
    });
    if ((start + kKvTile) % kTcSplit != 0 && f + 1 < it.n_tiles) continue;
    store_partial_t<HD>(partials, row0, n_rep, max_splits, start / kTcSplit, st);
  }
  if (n_zc != 1) return;
  __syncwarp();  // the warp ran every split of its rows: it merges them (its own partials)
  for (int r = 0; r < n_rep; ++r) merge_row<HD>(a, partials, row0 + r, max_splits, lane);
}

// Quarter tiles (PARTS 4) in a ring of NBUF: 3 (16 warps a CTA) or 6 (8), as the plan says
// (attention_quarter_ring). (The transposed warp's half tiles and its rings of 4, 12 and 24
// were never chosen and are no longer instantiated.)
// An FP8 cache (a.k_fp8): the ring's in-place dequantizing form (attention_tc_decode_warp.cuh).
template <int HD, int NBUF>
cudaError_t launch_nq(const AttentionArgs& a, float* scratch, const AttentionPlan& p,
                      cudaStream_t stream) {
  constexpr int PARTS = 4, ROWS = kKvTile / PARTS, W = kDecWarps<NBUF, ROWS>;
  constexpr size_t SMEM = decode_smem_bytes<HD, NBUF, ROWS, W>();
  if (a.k_fp8 != nullptr)
    return launch_decode_warps<HD, W, SMEM,
                               attention_tc_decode_nq_kernel<HD, NBUF, PARTS, W, true>>(
        a, scratch, p, stream);
  return launch_decode_warps<HD, W, SMEM,
                             attention_tc_decode_nq_kernel<HD, NBUF, PARTS, W, false>>(
      a, scratch, p, stream);
}

template <int HD>
cudaError_t launch_ring(const AttentionArgs& a, float* scratch, const AttentionPlan& p,
                        cudaStream_t stream) {
  if (p.ring == 3) return launch_nq<HD, 3>(a, scratch, p, stream);
  if (p.ring == 6) return launch_nq<HD, 6>(a, scratch, p, stream);
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_attention_tc_decode_nq(const AttentionArgs& a, float* scratch,
                                          const AttentionPlan& p, cudaStream_t stream) {
  if (a.n_kv_heads <= 0 || a.n_heads / a.n_kv_heads > kDecNqMaxRep) return cudaErrorInvalidValue;
  return with_head_dim(a.head_dim, [&](auto hd) {
    return launch_ring<decltype(hd)::value>(a, scratch, p, stream);
  });
}

}  // namespace detllm::kernels::cuda
