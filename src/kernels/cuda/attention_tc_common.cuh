// What both schedules of the tensor-core attention share (attention_tc.cu: CTAs of packed
// rows for prefill and mixed steps; attention_tc_decode.cu: one warp per (token, KV head,
// splits) for decode steps): the numerics constants, the per-tile arithmetic and the split
// merge. A row's bits are made only here, so the two schedules agree by construction (the
// tests also check it: CudaAttentionTc.BitIdenticalAcross…).
//
// The per-tile arithmetic of one warp tile of 16 rows (rows = (token, query head) pairs; the
// thread holds rows gq = lane / 4 and gq + 8, columns 2·(lane % 4) + {0, 1} of each n8 tile):
//   scores  S = Q·Kᵀ (mma m16n8k16, head dims in k-steps of 16 ascending), · scale·log2 e,
//           -inf past the row's last position;
//   softmax tile max by the thread's 16 values then xor-shuffles 1, 2; c = 2^(m - m_new);
//           p = 2^(s - m_new) (0 where masked); row sum in the thread's column order, then
//           xor-shuffles 1, 2; l = l·c + Σp; o = o·c;
//   values  o += P (bf16) · V, 16 positions a k-step, ascending.
// A split (kTcSplit positions, aligned to absolute 0) starts from (−inf, 0, 0); split states
// merge in ascending order by merge_state / merge_value.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_tc_grid.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/mma_ptx.cuh"
#include "kernels/cuda/pdl.cuh"

namespace detllm::kernels::cuda::tc {

constexpr int kWarpRows = 16;  // rows of one m16n8k16 tile

// The launchers' one head-dim dispatch: f(std::integral_constant<int, HD>{}) for the
// tensor-core attention's head dims 16, 32, 64 and 128; cudaErrorInvalidValue for others.
template <class F>
cudaError_t with_head_dim(int head_dim, F&& f) {
  switch (head_dim) {
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    default:
      return cudaErrorInvalidValue;
  }
}
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xffffffffu;

// Shared-memory row stride of a K/V tile (bf16 elements): conflict-free ldmatrix rows.
template <int HD>
constexpr int kLd = HD + 8;

using ptx::cp_async16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::ldmatrix_x4;
using ptx::ldmatrix_x4_trans;
using ptx::mma_bf16;
using ptx::pack_bf16;
using ptx::smem_u32;

// Row q's pairs of k-step kk, rounded to bf16: lo = columns 16kk + 2cq and + 1, hi = 16kk +
// 8 + 2cq and + 1 (the lower column in the low half); q nullptr: no row there, zeros. A row's
// Q fragment registers in either operand role (A of the row layout, B of the transposed warp).
__device__ __forceinline__ void q_row_pairs(const float* q, int kk, int cq, uint32_t& lo,
                                            uint32_t& hi) {
  float2 a = make_float2(0.0f, 0.0f), b = a;
  if (q != nullptr) {
    a = *reinterpret_cast<const float2*>(q + kk * 16 + 2 * cq);
    b = *reinterpret_cast<const float2*>(q + kk * 16 + 8 + 2 * cq);
  }
  lo = pack_bf16(a.x, a.y);
  hi = pack_bf16(b.x, b.y);
}

// The Q fragments (A of m16n8k16) of the thread's two rows, rounded to bf16: [kk][0/1] = rows
// gq / gq + 8, columns 2cq..; [kk][2/3]: columns 8 + 2cq... `qr[i]` is row i's fp32 q (nullptr:
// no row there, zeros).
template <int HD>
__device__ __forceinline__ void load_q_fragments(uint32_t (&qf)[HD / 16][4],
                                                 const float* const (&qr)[2], int cq) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) q_row_pairs(qr[i], kk, cq, qf[kk][i], qf[kk][2 + i]);
  }
}

// log2 of the KV block size when it is a power of two ≥ 16 (a 16-row group of a tile, aligned
// to 0, then lies in one block), else −1.
__device__ __forceinline__ int block_shift_of(int block_size) {
  return block_size >= 16 && (block_size & (block_size - 1)) == 0 ? __ffs(block_size) - 1 : -1;
}

// The cache slot of position p through the sequence's block table, −1 at or past range_end
// (block_shift from block_shift_of: a shift and a mask instead of a division).
__device__ __forceinline__ int kv_slot(const int* table, int p, int range_end, int block_size,
                                       int block_shift) {
  if (p >= range_end) return -1;
  if (block_shift >= 0) return (table[p >> block_shift] << block_shift) | (p & (block_size - 1));
  return table[p / block_size] * block_size + p % block_size;
}

// 16 bytes (8 elements) of cache row `slot` from `src` (the row's first element of this chunk)
// into shared memory at `dst`; slot −1: zeros, and the cache is not read (a source size of 0).
// One straight-line copy either way: no branch per row.
// PREFETCH: the L2 prefetch size of the copy (0 none, or 128 bytes); the same data.
template <int PREFETCH = 0>
__device__ __forceinline__ void copy_chunk(void* dst, const uint16_t* src, int slot,
                                           uint32_t row_elems) {
  const uint32_t s = slot < 0 ? 0u : static_cast<uint32_t>(slot);
  ptx::cp_async16_zfill_prefetch<PREFETCH>(dst, src + static_cast<uint64_t>(s) * row_elems,
                                           slot < 0 ? 0 : 16);
}

// One split's running state for the thread's two rows.
template <int HD>
struct SplitState {
  float m[2], l[2];
  float o[HD / 8][4];
  __device__ __forceinline__ void reset() {
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  }
};

// Scores of the tile's n8 column tiles [NT0, NT0 + NTN) (S = Q·Kᵀ, k-steps ascending), Q in
// registers; `kb` holds their K rows (row 0 = position 8·NT0 of the tile). Each S element is
// one chain over the k-steps, independent of the others, so a tile's scores made in parts are
// the same bits as made whole.
template <int HD, int NT0, int NTN>
__device__ __forceinline__ void tile_qk_part(const __nv_bfloat16* kb,
                                             const uint32_t (&qf)[HD / 16][4],
                                             float (&s)[kKvTile / 8][4]) {
  constexpr int LD = kLd<HD>;
  static_assert(NT0 % 2 == 0 && NTN % 2 == 0 && NT0 + NTN <= kKvTile / 8, "pairs of n8 tiles");
  const int lane = threadIdx.x & 31;
  const int ldm = lane >> 3, ldr = lane & 7;
#pragma unroll
  for (int nt = NT0; nt < NT0 + NTN; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
    for (int nt = NT0; nt < NT0 + NTN; nt += 2) {
      uint32_t r[4];
      ldmatrix_x4(r, kb + ((nt - NT0 + (ldm >> 1)) * 8 + ldr) * LD + kk * 16 + (ldm & 1) * 8);
      mma_bf16(s[nt], qf[kk], r[0], r[1]);
      mma_bf16(s[nt + 1], qf[kk], r[2], r[3]);
    }
  }
}

// The score half of a tile (S = Q·Kᵀ, k-steps ascending), Q in registers.
template <int HD>
__device__ __forceinline__ void tile_qk(const __nv_bfloat16* kb, const uint32_t (&qf)[HD / 16][4],
                                        float (&s)[kKvTile / 8][4]) {
  tile_qk_part<HD, 0, kKvTile / 8>(kb, qf, s);
}

// O's rescale by a tile's factors (rows gq: c[0], gq + 8: c[1]).
// A warp whose rows all have c = 1 skips the multiplies: x·1 = x for every value O can hold
// (finite, ±inf, and NaN, which the MMAs and multiplies only produce canonical), so the bits
// are the same whichever rows share the warp.
template <int HD>
__device__ __forceinline__ void rescale_o(SplitState<HD>& st, const float (&c)[2]) {
  if (__all_sync(kFull, c[0] == 1.0f && c[1] == 1.0f)) return;
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    st.o[dt][0] = __fmul_rn(st.o[dt][0], c[0]);
    st.o[dt][1] = __fmul_rn(st.o[dt][1], c[0]);
    st.o[dt][2] = __fmul_rn(st.o[dt][2], c[1]);
    st.o[dt][3] = __fmul_rn(st.o[dt][3], c[1]);
  }
}

// The first part of softmax_rows: the scores in `s` scaled by scale·log2 e and masked (-inf
// past lim; MASK = false: the caller checked no column is past it), and the tile's row max mt
// (the thread's values, then xor-shuffles 1, 2). s[nt][2i + e] is row i's column
// 8·nt + 2cq + e.
template <bool MASK, int R>
__device__ __forceinline__ void tile_row_max(int start, const int (&lim)[R], float scale_log2,
                                             float (&s)[kKvTile / 8][2 * R], float (&mt)[R]) {
  constexpr int NT = kKvTile / 8;
  const int cq = threadIdx.x & 3;
#pragma unroll
  for (int i = 0; i < R; ++i) mt[i] = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 2 * R; ++e) {
      float v;
      if constexpr (MASK) {
        const int col = start + nt * 8 + 2 * cq + (e & 1);
        v = col <= lim[e >> 1] ? __fmul_rn(s[nt][e], scale_log2) : -INFINITY;
      } else {
        v = __fmul_rn(s[nt][e], scale_log2);
      }
      s[nt][e] = v;
      mt[e >> 1] = fmaxf(mt[e >> 1], v);
    }
#pragma unroll
  for (int i = 0; i < R; ++i) {
    mt[i] = fmaxf(mt[i], __shfl_xor_sync(kFull, mt[i], 1));
    mt[i] = fmaxf(mt[i], __shfl_xor_sync(kFull, mt[i], 2));
  }
}

// The second part: given the row's running max before the tile (m) and with it (m_new =
// max(m, the tile's row max)), O's factor c = 2^(m − m_new), p = 2^(s − m_new) in `s` (0 where
// masked) and the tile's row sum ts (the thread's values in ascending column order, then
// xor-shuffles 1, 2). MASK = false: p = 2^(s − ref) without the s == −inf select (s is finite
// there unless the product overflowed to −inf, where exp2f(−inf − ref) = +0 = the select's
// value, for ref finite or +inf).
// LD: the tests' negative control only (tests/cuda/attention_negative_control.cu instantiates
// it; no library kernel does): rows gq + 8 sum their tile backwards, so a row's bits depend on
// its place in the warp tile.
template <bool MASK, int R, bool LD = false>
__device__ __forceinline__ void tile_exp_sum(const float (&m)[R], const float (&m_new)[R],
                                             float (&s)[kKvTile / 8][2 * R],
                                             float (&c)[R], float (&ts)[R]) {
  constexpr int NT = kKvTile / 8;
  float ref[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    ref[i] = m_new[i] == -INFINITY ? 0.0f : m_new[i];
    c[i] = m[i] == m_new[i] ? 1.0f : exp2f(__fsub_rn(m[i], ref[i]));
  }
#pragma unroll
  for (int i = 0; i < R; ++i) ts[i] = 0.0f;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 2 * R; ++e) {
      const int i = e >> 1;
      float p;
      if constexpr (MASK) {
        p = s[nt][e] == -INFINITY ? 0.0f : exp2f(__fsub_rn(s[nt][e], ref[i]));
      } else {
        p = exp2f(__fsub_rn(s[nt][e], ref[i]));
      }
      s[nt][e] = p;
      ts[i] = __fadd_rn(ts[i], p);
    }
  if constexpr (R == 2 && LD) {  // the tests' negative control: rows gq + 8 sum backwards
    ts[1] = 0.0f;
#pragma unroll
    for (int nt = NT - 1; nt >= 0; --nt) {
      ts[1] = __fadd_rn(ts[1], s[nt][3]);
      ts[1] = __fadd_rn(ts[1], s[nt][2]);
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
    ts[i] = __fadd_rn(ts[i], __shfl_xor_sync(kFull, ts[i], 1));
    ts[i] = __fadd_rn(ts[i], __shfl_xor_sync(kFull, ts[i], 2));
  }
}

// The softmax of a tile for R rows of the thread (R = 2: rows gq and gq + 8 of the m16n8 tile;
// R = 1: row gq, the transposed decode warp's), after the scores are in `s`: tile_row_max, the
// running max m_new = max(m, mt), tile_exp_sum, and l = l·c + ts. Updates each row's (m, l)
// and returns its factor c for O (the caller rescales O, whose layout it knows). The
// arithmetic of a row does not depend on R. MASK as the two parts say.
template <bool MASK, int R, bool LD = false>
__device__ __forceinline__ void softmax_rows(int start, const int (&lim)[R], float scale_log2,
                                             float (&m)[R], float (&l)[R],
                                             float (&s)[kKvTile / 8][2 * R], float (&c)[R]) {
  float mt[R], m_new[R], ts[R];
  tile_row_max<MASK, R>(start, lim, scale_log2, s, mt);
#pragma unroll
  for (int i = 0; i < R; ++i) m_new[i] = fmaxf(m[i], mt[i]);
  tile_exp_sum<MASK, R, LD>(m, m_new, s, c, ts);
#pragma unroll
  for (int i = 0; i < R; ++i) {
    m[i] = m_new[i];
    l[i] = __fadd_rn(__fmul_rn(l[i], c[i]), ts[i]);
  }
}

// The softmax half of a tile for one m-tile (softmax_rows for the thread's two rows, then O's
// rescale).
template <int HD, bool MASK, bool LD = false>
__device__ __forceinline__ void tile_softmax(int start, const int (&lim)[2], float scale_log2,
                                             SplitState<HD>& st,
                                             float (&s)[kKvTile / 8][4]) {
  float c[2];
  softmax_rows<MASK, 2, LD>(start, lim, scale_log2, st.m, st.l, s, c);
  rescale_o<HD>(st, c);
}

// The first half of a tile: scores against the K tile `kb` (kKvTile rows of kLd<HD>, positions
// start…), the softmax update of `st` (m, l, o·c) and P left in `s` for tile_values. lim[i]:
// row i's last position (-1: no row). LD: the tests' negative control (tile_exp_sum).
template <int HD, bool LD = false>
__device__ __forceinline__ void tile_scores(const __nv_bfloat16* kb,
                                            const uint32_t (&qf)[HD / 16][4], int start,
                                            const int (&lim)[2], float scale_log2,
                                            SplitState<HD>& st, float (&s)[kKvTile / 8][4]) {
  tile_qk<HD>(kb, qf, s);
  tile_softmax<HD, true, LD>(start, lim, scale_log2, st, s);
}

// P's A fragment (m16n8k16) of k-step j, positions 16j … 16j + 15 of the tile, from the S
// accumulators left in `s` by the softmax, rounded to bf16.
__device__ __forceinline__ void p_fragment(const float (&s)[kKvTile / 8][4], int j,
                                           uint32_t (&pa)[4]) {
  pa[0] = pack_bf16(s[2 * j][0], s[2 * j][1]);
  pa[1] = pack_bf16(s[2 * j][2], s[2 * j][3]);
  pa[2] = pack_bf16(s[2 * j + 1][0], s[2 * j + 1][1]);
  pa[3] = pack_bf16(s[2 * j + 1][2], s[2 * j + 1][3]);
}

// o += P (bf16) · V for the tile's k-steps [J0, J0 + JN) (16 positions each, ascending); `vb`
// holds their V rows (row 0 = position 16·J0 of the tile). The k-steps of a tile made in
// parts, in ascending order, are the same chain as made whole.
template <int HD, int J0, int JN>
__device__ __forceinline__ void tile_values_part(const __nv_bfloat16* vb,
                                                 const float (&s)[kKvTile / 8][4],
                                                 SplitState<HD>& st) {
  constexpr int LD = kLd<HD>;
  static_assert(J0 + JN <= kKvTile / 16, "k-steps of the tile");
  const int lane = threadIdx.x & 31;
  const int ldm = lane >> 3, ldr = lane & 7;
#pragma unroll
  for (int j = J0; j < J0 + JN; ++j) {
    uint32_t pa[4];
    p_fragment(s, j, pa);
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt += 2) {
      uint32_t r[4];
      ldmatrix_x4_trans(r, vb + ((j - J0) * 16 + (ldm & 1) * 8 + ldr) * LD + (dt + (ldm >> 1)) * 8);
      mma_bf16(st.o[dt], pa, r[0], r[1]);
      mma_bf16(st.o[dt + 1], pa, r[2], r[3]);
    }
  }
}

// The second half: o += P (bf16) · V over the V tile `vb`; the S accumulators are P's A
// fragments, 16 positions a k-step, ascending.
template <int HD>
__device__ __forceinline__ void tile_values(const __nv_bfloat16* vb,
                                            const float (&s)[kKvTile / 8][4],
                                            SplitState<HD>& st) {
  tile_values_part<HD, 0, kKvTile / 16>(vb, s, st);
}

// ---- MT m-tiles per warp (the packed schedule's 32-row warps) --------------------------
// The same per-row operations as tile_scores / tile_values, in the same order, for MT m-tiles
// of 16 rows that share each K/V fragment read from shared memory (one ldmatrix feeds MT
// mma): only which rows sit beside a row in the warp changes, and no row's arithmetic reads
// another row. Q comes from shared memory (bf16, rounded once when staged, kLd<HD> a row):
// ldmatrix gives exactly load_q_fragments' fragments.

// Where element (row, col) of a tile in shared memory is (col a multiple of 8: one 16-byte
// chunk): SWZ = false rows of kLd<HD> (padded); SWZ = true rows of HD with the chunk index
// XORed with row % 8 (no padding; conflict-free ldmatrix and cp.async; HD ≥ 64). A tile's
// base row must be a multiple of 8. Only addresses change: the values read are the same.
template <int HD, bool SWZ>
__device__ __forceinline__ int tile_at(int row, int col) {
  if constexpr (SWZ) {
    static_assert(HD >= 64, "the swizzle needs 8 chunks a row");
    return row * HD + ((((col >> 3) ^ (row & 7))) << 3);
  } else {
    return row * kLd<HD> + col;
  }
}


// tile_scores for MT m-tiles: `qs` is the warp's first m-tile row in shared memory (MT · 16
// rows, tile_at<HD, SWZ>); lim[j][i]: row i of m-tile j's last position (-1: none). mask[j]:
// whether m-tile j needs the masked softmax (false only when every column ≤ both its rows'
// lim); warp-uniform.
template <int HD, int MT, bool SWZ = false>
__device__ __forceinline__ void tile_scores_mt(const __nv_bfloat16* kb, const __nv_bfloat16* qs,
                                               int start, const int (&lim)[MT][2],
                                               const bool (&mask)[MT], float scale_log2,
                                               SplitState<HD> (&st)[MT],
                                               float (&s)[MT][kKvTile / 8][4]) {
  constexpr int NT = kKvTile / 8;
  const int lane = threadIdx.x & 31;
  const int ldm = lane >> 3, ldr = lane & 7;
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) s[j][nt][0] = s[j][nt][1] = s[j][nt][2] = s[j][nt][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    uint32_t qf[MT][4];  // A: matrices (rows 0–7 | 8–15) × (cols 0–7 | 8–15) of the k-step
#pragma unroll
    for (int j = 0; j < MT; ++j)
      ldmatrix_x4(qf[j], qs + tile_at<HD, SWZ>(j * kWarpRows + (ldm & 1) * 8 + ldr,
                                                kk * 16 + (ldm >> 1) * 8));
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {
      uint32_t r[4];
      ldmatrix_x4(r, kb + tile_at<HD, SWZ>((nt + (ldm >> 1)) * 8 + ldr, kk * 16 + (ldm & 1) * 8));
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        mma_bf16(s[j][nt], qf[j], r[0], r[1]);
        mma_bf16(s[j][nt + 1], qf[j], r[2], r[3]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    if (mask[j]) {
      tile_softmax<HD, true>(start, lim[j], scale_log2, st[j], s[j]);
    } else {
      tile_softmax<HD, false>(start, lim[j], scale_log2, st[j], s[j]);
    }
  }
}

// tile_values for MT m-tiles: each V fragment feeds the MT m-tiles' mma.
template <int HD, int MT, bool SWZ = false>
__device__ __forceinline__ void tile_values_mt(const __nv_bfloat16* vb,
                                               const float (&s)[MT][kKvTile / 8][4],
                                               SplitState<HD> (&st)[MT]) {
  const int lane = threadIdx.x & 31;
  const int ldm = lane >> 3, ldr = lane & 7;
#pragma unroll
  for (int k = 0; k < kKvTile / 16; ++k) {
    uint32_t pa[MT][4];
#pragma unroll
    for (int j = 0; j < MT; ++j) p_fragment(s[j], k, pa[j]);
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt += 2) {
      uint32_t r[4];
      ldmatrix_x4_trans(r, vb + tile_at<HD, SWZ>(k * 16 + (ldm & 1) * 8 + ldr, (dt + (ldm >> 1)) * 8));
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        mma_bf16(st[j].o[dt], pa[j], r[0], r[1]);
        mma_bf16(st[j].o[dt + 1], pa[j], r[2], r[3]);
      }
    }
  }
}

// (M, L) ⊕ (m, l): the one merge of two partial softmax states (max in log2 units), rounding
// pinned; returns the weights of the old and the new accumulator. Used by the in-CTA merge
// and by the merge kernel alike, element by element, so every placement gives the same bits.
struct MergeWeights {
  float a, b;
};
__device__ __forceinline__ MergeWeights merge_state(float& M, float& L, float m, float l) {
  const float mn = fmaxf(M, m);
  const float a = M == mn ? 1.0f : exp2f(__fsub_rn(M, mn));  // 0 when M = -inf
  const float b = m == mn ? 1.0f : exp2f(__fsub_rn(m, mn));
  L = __fadd_rn(__fmul_rn(L, a), __fmul_rn(l, b));
  M = mn;
  return {a, b};
}
__device__ __forceinline__ float merge_value(float O, float o, MergeWeights w) {
  return __fadd_rn(__fmul_rn(O, w.a), __fmul_rn(o, w.b));
}

// Split partials: row (t, h)'s split z at ((t · n_heads + h) · max_splits + z) · (HD + 2):
// m, l, then o. Row i of the thread (its quad's column pairs) stores its state.
template <int HD>
__device__ __forceinline__ void store_partial(float* partials, int64_t row, int max_splits, int z,
                                              const SplitState<HD>& st, int i) {
  const int cq = threadIdx.x & 3;
  float* part = partials + (row * max_splits + z) * (HD + 2);
  if (cq == 0) {
    part[0] = st.m[i];
    part[1] = st.l[i];
  }
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    part[2 + dt * 8 + 2 * cq] = st.o[dt][2 * i];
    part[2 + dt * 8 + 2 * cq + 1] = st.o[dt][2 * i + 1];
  }
}

// The merge kernel has internal linkage: each including file gets its own (a template kernel
// instantiated in two files without relocatable device code must not share a host stub).
namespace {

// One warp per (token, head) row (merge_row: the decode warps' in-warp merge and the merge in
// a group's last CTA): merges its split partials in order 0, 1, … with the same
// merge_state/merge_value as the in-CTA path, then divides by L and stores (fp32 or bf16).
// The partials of kMergeBatch splits are loaded together, and the next batch's loads are in
// flight while a batch is folded (a long row has up to hundreds of splits: one load latency
// per split, or per batch, would dominate); the fold itself stays one ascending chain.
constexpr int kMergeBatch = 8;
template <int HD>
struct MergeBatch {
  static constexpr int PER_LANE = (HD + 31) / 32;
  float m[kMergeBatch], l[kMergeBatch], o[kMergeBatch][PER_LANE];
  // Splits z0… of `row` (those below n_splits).
  __device__ __forceinline__ void load(const float* partials, int64_t row, int max_splits,
                                       int z0, int n_splits, int lane) {
#pragma unroll
    for (int b = 0; b < kMergeBatch; ++b) {
      if (z0 + b >= n_splits) break;
      // ld.global.cg: from the L2, where other CTAs' partials are.
      const float* part = partials + (row * max_splits + z0 + b) * (HD + 2);
      m[b] = __ldcg(part);
      l[b] = __ldcg(part + 1);
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) {
        const int d = lane + 32 * i;
        o[b][i] = d < HD ? __ldcg(part + 2 + d) : 0.0f;
      }
    }
  }
  // Folds splits z0… into (M, L, O), in ascending order.
  __device__ __forceinline__ void fold(float& M, float& L, float (&O)[PER_LANE], int z0,
                                       int n_splits) const {
#pragma unroll
    for (int b = 0; b < kMergeBatch; ++b) {
      if (z0 + b >= n_splits) break;
      const MergeWeights w = merge_state(M, L, m[b], l[b]);
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) O[i] = merge_value(O[i], o[b][i], w);
    }
  }
};
// Row `row` of the step: its split partials merged in ascending order, then O / L stored (fp32
// or bf16). The whole warp, lanes over head dims. Run by the merge kernel, and by a decode warp
// that ran every split of its rows (after a __syncwarp: its own partials).
template <int HD>
__device__ __forceinline__ void merge_row(const AttentionArgs& a, const float* partials,
                                          int64_t row, int max_splits, int lane) {
  constexpr int PER_LANE = MergeBatch<HD>::PER_LANE;
  const int t = static_cast<int>(row / a.n_heads);
  const int n_splits = a.positions[t] / kTcSplit + 1;
  float M = -INFINITY, L = 0.0f, O[PER_LANE];
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) O[i] = 0.0f;
  // Two batches in turn: the loads of one are in flight while the other is folded.
  MergeBatch<HD> even, odd;
  even.load(partials, row, max_splits, 0, n_splits, lane);
  for (int z0 = 0; z0 < n_splits; z0 += 2 * kMergeBatch) {
    odd.load(partials, row, max_splits, z0 + kMergeBatch, n_splits, lane);
    even.fold(M, L, O, z0, n_splits);
    even.load(partials, row, max_splits, z0 + 2 * kMergeBatch, n_splits, lane);
    odd.fold(M, L, O, z0 + kMergeBatch, n_splits);
  }
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int d = lane + 32 * i;
    if (d >= HD) continue;
    const float v = __fdiv_rn(O[i], L);
    if (a.out_bf16 != nullptr) {
      a.out_bf16[row * HD + d] = __float2bfloat16_rn(v);
    } else {
      a.out[row * HD + d] = v;
    }
  }
}

// The scan merge kernel: a CTA per (token, head) row, a warp per 32 of its head dims (one a lane),
// which walks the row's splits 32 at a time. The fold's chain is merge_row's — M, then for each
// split in ascending order a = M == mn ? 1 : 2^(M − mn), b likewise, L = L·a + l·b, O = O·a + o·b
// — but what does not depend on the chain runs beside it: the running max is exact, so a chunk's
// 32 running maxes come from a scan over its lanes (max is order-free: the chain's very values),
// and with them each split's a, b and l·b, one split a lane; then the L and O chains take them
// from the lanes in order, two dependent roundings a split, while the next chunk's partials are in
// flight. The same operations on the same values: merge_row's bits (the tests compare the two:
// the decode warps' in-warp merge and the shared-split CTA's in-CTA merge against this kernel).
// Nsight Compute, H200 (docs/cuda.md, "The split merge as a scan"): one warp a row folding split
// by split took 22.9 µs at 1 × 32768 (128 splits, 32 rows), 36% of that step's attention.
template <int HD>
struct MergeChunk {
  float m, l;   // lane j: split z0 + j's (−inf and 0 past the row's splits)
  float o[32];  // o[j]: split z0 + j's element at the lane's head dim (0 past)
  __device__ __forceinline__ void load(const float* part, int z0, int n_splits, int d, int lane) {
    const int z = z0 + lane;
    m = z < n_splits ? __ldcg(part + static_cast<int64_t>(z) * (HD + 2)) : -INFINITY;
    l = z < n_splits ? __ldcg(part + static_cast<int64_t>(z) * (HD + 2) + 1) : 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j)
      o[j] = z0 + j < n_splits && d < HD
                 ? __ldcg(part + static_cast<int64_t>(z0 + j) * (HD + 2) + 2 + d)
                 : 0.0f;
  }
  // Folds the chunk's splits (those below n_splits) into (M, L, O), in ascending order.
  __device__ __forceinline__ void fold(float& M, float& L, float& O, int z0, int n_splits,
                                       int lane) const {
    float mz = m;  // the running max through split z0 + lane
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const float t = __shfl_up_sync(kFull, mz, off);
      if (lane >= off) mz = fmaxf(mz, t);
    }
    mz = fmaxf(mz, M);
    float mp = __shfl_up_sync(kFull, mz, 1);  // the running max before it
    if (lane == 0) mp = M;
    const float a = mp == mz ? 1.0f : exp2f(__fsub_rn(mp, mz));  // merge_state's a and b
    const float b = m == mz ? 1.0f : exp2f(__fsub_rn(m, mz));
    const float lb = __fmul_rn(l, b);
    const int n = min(32, n_splits - z0);
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      if (j >= n) break;
      const float aj = __shfl_sync(kFull, a, j), bj = __shfl_sync(kFull, b, j);
      L = __fadd_rn(__fmul_rn(L, aj), __shfl_sync(kFull, lb, j));
      O = __fadd_rn(__fmul_rn(O, aj), __fmul_rn(o[j], bj));
    }
    M = __shfl_sync(kFull, mz, n - 1);
  }
};

template <int HD, int kRing>
__global__ void merge_scan_kernel(const AttentionArgs a, const float* partials, int max_splits) {
  pdl_wait();
  pdl_release();
  const int64_t row = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int d = static_cast<int>(threadIdx.x);  // the lane's head dim (warp w: 32w …)
  const int n_splits = a.positions[row / a.n_heads] / kTcSplit + 1;
  const float* part = partials + row * max_splits * (HD + 2);
  float M = -INFINITY, L = 0.0f, O = 0.0f;
  if constexpr (kRing == 2) {
    // Two chunks in turn: one's loads in flight while the other folds.
    MergeChunk<HD> c0, c1;
    c0.load(part, 0, n_splits, d, lane);
    for (int z0 = 0; z0 < n_splits; z0 += 64) {
      if (z0 + 32 < n_splits) c1.load(part, z0 + 32, n_splits, d, lane);
      c0.fold(M, L, O, z0, n_splits, lane);
      if (z0 + 32 >= n_splits) break;
      if (z0 + 64 < n_splits) c0.load(part, z0 + 64, n_splits, d, lane);
      c1.fold(M, L, O, z0 + 32, n_splits, lane);
    }
  } else {
    // Four chunks in a ring (128 splits in flight at once: a 32768-position row's whole fold
    // after one load latency); chunk k + 4's loads go out when chunk k is folded.
    static_assert(kRing == 4, "a ring of 2 or 4 chunks");
    MergeChunk<HD> c0, c1, c2, c3;
    c0.load(part, 0, n_splits, d, lane);
    if (32 < n_splits) c1.load(part, 32, n_splits, d, lane);
    if (64 < n_splits) c2.load(part, 64, n_splits, d, lane);
    if (96 < n_splits) c3.load(part, 96, n_splits, d, lane);
    for (int z0 = 0; z0 < n_splits; z0 += 128) {
      c0.fold(M, L, O, z0, n_splits, lane);
      if (z0 + 32 >= n_splits) break;
      if (z0 + 128 < n_splits) c0.load(part, z0 + 128, n_splits, d, lane);
      c1.fold(M, L, O, z0 + 32, n_splits, lane);
      if (z0 + 64 >= n_splits) break;
      if (z0 + 160 < n_splits) c1.load(part, z0 + 160, n_splits, d, lane);
      c2.fold(M, L, O, z0 + 64, n_splits, lane);
      if (z0 + 96 >= n_splits) break;
      if (z0 + 192 < n_splits) c2.load(part, z0 + 192, n_splits, d, lane);
      c3.fold(M, L, O, z0 + 96, n_splits, lane);
      if (z0 + 224 < n_splits) c3.load(part, z0 + 224, n_splits, d, lane);
    }
  }
  if (d >= HD) return;
  const float v = __fdiv_rn(O, L);
  if (a.out_bf16 != nullptr) {
    a.out_bf16[row * HD + d] = __float2bfloat16_rn(v);
  } else {
    a.out[row * HD + d] = v;
  }
}

// A warp a row, four rows a CTA: merge_row (the short rows' merge kernel).
template <int HD>
__global__ void merge_rows_kernel(const AttentionArgs a, const float* partials, int max_splits) {
  pdl_wait();
  pdl_release();
  const int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + (threadIdx.x >> 5);
  if (row >= static_cast<int64_t>(a.n_tokens) * a.n_heads) return;
  merge_row<HD>(a, partials, row, max_splits, threadIdx.x & 31);
}

// The split merge after a grid that stored every split's partials: the scan (a CTA a row) when
// the block table is wider than kScanMergeSplits splits, else a warp a row — both merge_row's
// bits. H200, ncu/bench (docs/cuda.md, "The split merge as a scan"): the scan is faster at 33
// and 128 splits a row (1 × 8192 18.7 → 16.9 µs with the attention, 1 × 32768 52.9 → 45.9) and
// slower at 9 (64 × 2048: 145.4 → 148.3 µs), where a warp's chain is short.
constexpr int kScanMergeSplits = 16;
// Rows wider than 96 splits keep four chunks in flight (168 registers against 96): 1 × 32768
// 45.8 → 44.6–44.7 µs with the attention; at 33 and 65 splits the ring of 2 is faster (64 × 8192
// 562.5 against 565.2 µs: fewer CTAs an SM with the larger ring; 1 × 16384 27.3 against 27.7).
constexpr int kScanRing4Splits = 96;
template <int HD>
cudaError_t launch_merge_partials(const AttentionArgs& a, const float* partials, int max_splits,
                                  cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(a.n_tokens) * a.n_heads;
  if (max_splits > kScanRing4Splits)
    return launch_pdl(a.pdl, merge_scan_kernel<HD, 4>, static_cast<unsigned>(rows),
                      32 * ((HD + 31) / 32), 0, stream, a, partials, max_splits);
  if (max_splits > kScanMergeSplits)
    return launch_pdl(a.pdl, merge_scan_kernel<HD, 2>, static_cast<unsigned>(rows),
                      32 * ((HD + 31) / 32), 0, stream, a, partials, max_splits);
  return launch_pdl(a.pdl, merge_rows_kernel<HD>, static_cast<unsigned>((rows + 3) / 4), 128, 0,
                    stream, a, partials, max_splits);
}

}  // namespace

// The run of the step's tokens [seg_begin, end) that belong to seg_begin's sequence (tokens of
// one sequence are adjacent), and their largest position.
__device__ __forceinline__ int segment_end(const AttentionArgs& a, int seg_begin, int t_end,
                                           int& max_pos) {
  const int seq = a.seq_of_token[seg_begin];
  int seg_end = seg_begin + 1;
  max_pos = a.positions[seg_begin];
  while (seg_end < t_end && a.seq_of_token[seg_end] == seq) {
    max_pos = max(max_pos, a.positions[seg_end]);
    ++seg_end;
  }
  return seg_end;
}

// A segment as a CTA of the packed schedules runs it (the prologue of attention_tc_kernel,
// attention_tc_mt_kernel, attention_wg_kernel and attention_tc_shared_kernel): the run of the
// CTA's tokens [seg_begin, end) of seg_begin's sequence, its largest position, its splits, the
// sequence's block table row, and the splits this CTA runs of it: all, or with split_blocks
// the per_cta splits of round blockIdx.z, [z_begin, z_end) (z_begin ≥ n_splits: none; z_end
// may pass n_splits).
struct SegmentSplits {
  int end, max_pos, n_splits, z_begin, z_end;
  const int* table;
};
__device__ __forceinline__ SegmentSplits segment_splits(const AttentionArgs& a, int seg_begin,
                                                        int t_end, bool split_blocks,
                                                        int per_cta = 1) {
  SegmentSplits s;
  const int seq = a.seq_of_token[seg_begin];
  s.end = segment_end(a, seg_begin, t_end, s.max_pos);
  s.n_splits = s.max_pos / kTcSplit + 1;
  s.z_begin = split_blocks ? static_cast<int>(blockIdx.z) * per_cta : 0;
  s.z_end = split_blocks ? s.z_begin + per_cta : s.n_splits;
  s.table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks;
  return s;
}

// The largest / smallest v over the warp's 32 lanes (xor butterflies: exact, order-free).
__device__ __forceinline__ int warp_max(int v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(kFull, v, off));
  return v;
}
__device__ __forceinline__ int warp_min(int v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = min(v, __shfl_xor_sync(kFull, v, off));
  return v;
}

// The thread's two rows in a packed CTA of 16-row warps (attention_tc_kernel, attention_wg_kernel):
// rows gq and gq + 8 of warp `warp`, row r = (token t_begin + r / n_rep, head g·n_rep + r % n_rep)
// while r < tq·n_rep and the token is in the CTA.
template <int HD>
struct PackedRows {
  int t[2], h[2], pos[2];  // token, query head, position (-1: no row)
  bool ok[2];
  const float* q[2];       // the row's fp32 q (nullptr: no row)

  __device__ __forceinline__ PackedRows(const AttentionArgs& a, int warp, int gq, int t_begin,
                                        int t_end, int tq, int g, int n_rep) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = warp * kWarpRows + gq + 8 * i;
      t[i] = t_begin + r / n_rep;
      ok[i] = r < tq * n_rep && t[i] < t_end;
      h[i] = g * n_rep + r % n_rep;
      pos[i] = ok[i] ? a.positions[t[i]] : -1;
      q[i] = ok[i] ? a.q + (static_cast<int64_t>(t[i]) * a.n_heads + h[i]) * HD : nullptr;
    }
  }
  // lim[i]: row i's last position if its token is in the segment [seg_begin, seg_end), else -1.
  __device__ __forceinline__ void limits(int seg_begin, int seg_end, int (&lim)[2]) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) lim[i] = ok[i] && t[i] >= seg_begin && t[i] < seg_end ? pos[i] : -1;
  }
  // Row i's index among the step's (token, head) rows (store_partial's, the output's).
  __device__ __forceinline__ int64_t row(const AttentionArgs& a, int i) const {
    return static_cast<int64_t>(t[i]) * a.n_heads + h[i];
  }
};

// The end of split z (its first position `first`): each of the thread's rows whose position
// reaches it stores the split's state (a CTA per split) or merges it into (M, L, O) in order.
template <int HD>
__device__ __forceinline__ void end_split(const AttentionArgs& a, const PackedRows<HD>& rows,
                                          const int (&lim)[2], int first, int z,
                                          bool split_blocks, float* partials, int max_splits,
                                          const SplitState<HD>& st, float (&M)[2], float (&L)[2],
                                          float (&O)[HD / 8][4]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (lim[i] < first) continue;
    if (split_blocks) {
      store_partial<HD>(partials, rows.row(a, i), max_splits, z, st, i);
    } else {
      const MergeWeights w = merge_state(M[i], L[i], st.m[i], st.l[i]);
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        O[dt][2 * i] = merge_value(O[dt][2 * i], st.o[dt][2 * i], w);
        O[dt][2 * i + 1] = merge_value(O[dt][2 * i + 1], st.o[dt][2 * i + 1], w);
      }
    }
  }
}

// The merged rows out: O / L, fp32 or (a.out_bf16) that value rounded once to bf16, as the
// GEMM would round it.
template <int HD>
__device__ __forceinline__ void store_rows(const AttentionArgs& a, const PackedRows<HD>& rows,
                                           const float (&O)[HD / 8][4], const float (&L)[2],
                                           int cq) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!rows.ok[i]) continue;
    const int64_t at = rows.row(a, i) * HD;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      const float2 v =
          make_float2(__fdiv_rn(O[dt][2 * i], L[i]), __fdiv_rn(O[dt][2 * i + 1], L[i]));
      if (a.out_bf16 != nullptr) {
        const __nv_bfloat162 b = __floats2bfloat162_rn(v.x, v.y);
        *reinterpret_cast<__nv_bfloat162*>(a.out_bf16 + at + dt * 8 + 2 * cq) = b;
      } else {
        *reinterpret_cast<float2*>(a.out + at + dt * 8 + 2 * cq) = v;
      }
    }
  }
}

}  // namespace detllm::kernels::cuda::tc
