// Paged causal GQA attention on the tensor cores over a bf16 KV cache (FA2 style: mma.sync
// m16n8k16, bf16 in, fp32 accumulate), one kernel for prefill, chunks, decode and mixed steps.
// Invariant by construction (design.md Rule 2 and section 6; the grid is drawn in
// docs/architecture.md, "Attention's reduction grid"):
//   - a row is one (token, query head); a warp holds 16 rows, the GQA heads of its tokens
//     packed together; every row of every step runs in this one m16n8k16 fragment layout
//     (row max/sum: the thread's 16 values in ascending column order, then xor-shuffles 1, 2),
//     whatever the query length, the CTA's shape (warps, tokens) or its neighbours;
//   - KV is read in tiles of kKvTile positions aligned to absolute 0, grouped in splits of
//     kTcSplit positions (a fixed size, never a count chosen from the batch); each split's
//     (m, l, o) starts fresh and splits are merged in ascending order by one merge function,
//     whether they run one after another in the row's CTA or a CTA each + the merge kernel;
//   - masked scores are exact zeros (p = 0 by select, c = 1 when the max does not move), so a
//     tile that is entirely beyond a row's position (loaded for a neighbour) leaves the row's
//     state bit-identical;
//   - Q is rounded to bf16 here, K/V were rounded once by kv_append: q_len = 1 and
//     q_len = 16384 run the same arithmetic per row.
// Tests: test_cuda --gtest_filter='CudaAttentionTc*'; bench: cuda_attention_bench.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {
namespace {

constexpr int kKvTile = 64;    // positions per KV tile, aligned to absolute 0 (numerics)
constexpr int kTcSplit = 256;  // positions per KV split, aligned to absolute 0 (numerics)
static_assert(kTcSplit % kKvTile == 0, "a split is whole tiles");
constexpr int kWarpRows = 16;          // rows of one m16n8k16 tile
constexpr int kMaxCtasInBlock = 1024;  // fewer CTAs unsplit: a CTA per split instead
constexpr size_t kMaxSplitScratch = size_t(512) << 20;  // bytes of split partials at most
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ __forceinline__ void cp_async_wait1() {
  asm volatile("cp.async.wait_group 1;\n" ::);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
// d (16×8 fp32) += a (16×16 bf16, row) · b (16×8 bf16, col).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Two floats as bf16 (round to nearest even), lo in the low half (the lower column index).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// (M, L) ⊕ (m, l): the one merge of two partial softmax states (max in log2 units), rounding
// pinned; returns the weights of the old and the new accumulator. Used by the in-CTA merge
// and by the merge kernel alike, element by element, so both placements give the same bits.
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

// grid (ceil(n_tokens / tq), n_kv_heads, split_blocks ? max_splits : 1), block W warps.
// CTA x holds tokens [x·tq, x·tq + tq) (heaviest last tokens first: x is reversed) × the n_rep
// query heads of kv head blockIdx.y: row r = (token r / n_rep, head r % n_rep), warp r / 16.
// Rows of one mma tile share K/V, so the CTA walks the runs of tokens of one sequence
// (segments) one after another; rows outside the segment are fully masked meanwhile.
template <int HD, int W>
__global__ void __launch_bounds__(W * 32)
    attention_tc_kernel(const AttentionArgs a, int tq, float scale_log2, float* partials,
                        int max_splits, bool split_blocks) {
  constexpr int LD = HD + 8;       // smem row stride (bf16): conflict-free ldmatrix rows
  constexpr int KT = HD / 16;      // k-steps of Q·Kᵀ
  constexpr int DT = HD / 8;       // n-tiles of O
  constexpr int NT = kKvTile / 8;  // n-tiles of S
  constexpr int CH = HD / 8;       // 16-byte chunks of one K/V row
  static_assert(HD % 16 == 0 && DT % 2 == 0, "head_dim is whole k-steps");
  constexpr int kRowsPerPass = W * 32 / CH;  // K/V rows one pass of the CTA's threads copies
  static_assert(W * 32 % CH == 0 && kKvTile % kRowsPerPass == 0, "whole rows per pass");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* kbuf = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // 2 × (kKvTile, LD)
  __nv_bfloat16* vbuf = kbuf + 2 * kKvTile * LD;                     // 2 × (kKvTile, LD)

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gq = lane >> 2, cq = lane & 3;  // fragment row group and column pair
  const int g = blockIdx.y;
  const int n_rep = a.n_heads / a.n_kv_heads;
  const int t_begin = (gridDim.x - 1 - blockIdx.x) * tq;
  const int t_end = min(t_begin + tq, a.n_tokens);

  // The thread's two rows: gq and gq + 8 of its warp.
  int row_t[2], row_h[2], row_pos[2];
  bool row_ok[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * kWarpRows + gq + 8 * i;
    const int t = t_begin + r / n_rep;
    row_ok[i] = r < tq * n_rep && t < t_end;
    row_t[i] = t;
    row_h[i] = g * n_rep + r % n_rep;
    row_pos[i] = row_ok[i] ? a.positions[t] : -1;
  }
  // Q fragments (A of m16n8k16): [kk][0/1] = rows 0/1, cols 2cq..; [kk][2/3]: cols 8 + 2cq..
  uint32_t qf[KT][4];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float* qr = a.q + (static_cast<int64_t>(row_t[i]) * a.n_heads + row_h[i]) * HD;
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
      float2 lo = make_float2(0.0f, 0.0f), hi = lo;
      if (row_ok[i]) {
        lo = *reinterpret_cast<const float2*>(qr + kk * 16 + 2 * cq);
        hi = *reinterpret_cast<const float2*>(qr + kk * 16 + 8 + 2 * cq);
      }
      qf[kk][i] = pack_bf16(lo.x, lo.y);
      qf[kk][2 + i] = pack_bf16(hi.x, hi.y);
    }
  }

  float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f};  // merged splits
  float O[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) O[dt][0] = O[dt][1] = O[dt][2] = O[dt][3] = 0.0f;

  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * HD;  // elements per slot
  const int ldm = lane >> 3, ldr = lane & 7;  // ldmatrix: which 8×8 matrix, which of its rows

  for (int seg_begin = t_begin; seg_begin < t_end;) {
    const int seq = a.seq_of_token[seg_begin];
    int seg_end = seg_begin + 1, max_pos = a.positions[seg_begin];
    while (seg_end < t_end && a.seq_of_token[seg_end] == seq) {
      max_pos = max(max_pos, a.positions[seg_end]);
      ++seg_end;
    }
    int lim[2];  // the row's last position in this segment, -1 = not in it
#pragma unroll
    for (int i = 0; i < 2; ++i)
      lim[i] = row_ok[i] && row_t[i] >= seg_begin && row_t[i] < seg_end ? row_pos[i] : -1;
    int warp_lim = max(lim[0], lim[1]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      warp_lim = max(warp_lim, __shfl_xor_sync(kFull, warp_lim, off));
    const int n_splits = max_pos / kTcSplit + 1;
    int z_begin = 0, z_end = n_splits;
    if (split_blocks) {
      z_begin = blockIdx.z;
      z_end = z_begin + 1;
    }
    const int* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks;
    if (z_begin >= n_splits) {  // a CTA per split: this segment has no split z
      seg_begin = seg_end;
      continue;
    }
    // The CTA's positions [range_begin, range_end): its splits' tiles in one pipeline (the
    // next tile is copied while this one is used, across split edges too).
    const int range_begin = z_begin * kTcSplit;
    const int range_end = min(min(z_end, n_splits) * kTcSplit, max_pos + 1);
    const int n_tiles = (range_end - range_begin + kKvTile - 1) / kKvTile;
    {
      // Lane j of every warp looks up the slots of positions start + j and start + 32 + j
      // (-1 past `last`); the copies take them by shuffle: one table read per position.
      auto load_tile = [&](int buf, int start) {
        __nv_bfloat16* kb = kbuf + buf * kKvTile * LD;
        __nv_bfloat16* vb = vbuf + buf * kKvTile * LD;
        const int p0 = start + lane, p1 = p0 + 32;
        const int s0 =
            p0 < range_end ? table[p0 / a.block_size] * a.block_size + p0 % a.block_size : -1;
        const int s1 =
            p1 < range_end ? table[p1 / a.block_size] * a.block_size + p1 % a.block_size : -1;
        const int d = (threadIdx.x % CH) * 8;
#pragma unroll
        for (int k = 0; k < kKvTile / kRowsPerPass; ++k) {
          const int j = threadIdx.x / CH + kRowsPerPass * k;
          const int a0 = __shfl_sync(kFull, s0, j & 31), a1 = __shfl_sync(kFull, s1, j & 31);
          const int slot = j < 32 ? a0 : a1;
          if (slot >= 0) {
            const int64_t base = static_cast<int64_t>(slot) * kv_stride + g * HD + d;
            cp_async16(kb + j * LD + d, a.k_bf16 + base);
            cp_async16(vb + j * LD + d, a.v_bf16 + base);
          } else {  // never read from the cache: zeros (V must be finite where p = 0)
            *reinterpret_cast<uint4*>(kb + j * LD + d) = make_uint4(0, 0, 0, 0);
            *reinterpret_cast<uint4*>(vb + j * LD + d) = make_uint4(0, 0, 0, 0);
          }
        }
      };
      float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // this split
      float o[DT][4];
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

      load_tile(0, range_begin);
      cp_async_commit();
      for (int f = 0; f < n_tiles; ++f) {
        const int start = range_begin + f * kKvTile;
        const int z = start / kTcSplit, first = z * kTcSplit;  // the tile's split
        if (start == first) {  // a split starts: its state from zero
          m[0] = m[1] = -INFINITY;
          l[0] = l[1] = 0.0f;
#pragma unroll
          for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
        }
        if (f + 1 < n_tiles) load_tile((f + 1) & 1, start + kKvTile);
        cp_async_commit();
        cp_async_wait1();         // this thread's copies of tile f have landed
        __syncthreads();          // everyone's have
        if (warp_lim >= start) {  // else the tile is masked for every row of this warp
          const __nv_bfloat16* kb = kbuf + (f & 1) * kKvTile * LD;
          const __nv_bfloat16* vb = vbuf + (f & 1) * kKvTile * LD;
          float s[NT][4];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
          for (int kk = 0; kk < KT; ++kk) {
#pragma unroll
            for (int nt = 0; nt < NT; nt += 2) {
              uint32_t r[4];
              ldmatrix_x4(r, kb + ((nt + (ldm >> 1)) * 8 + ldr) * LD + kk * 16 + (ldm & 1) * 8);
              mma_bf16(s[nt], qf[kk], r[0], r[1]);
              mma_bf16(s[nt + 1], qf[kk], r[2], r[3]);
            }
          }
          // Scores in log2 units, masked to -inf past the row's position; tile row max.
          float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int col = start + nt * 8 + 2 * cq + (e & 1);
              const float v = col <= lim[e >> 1] ? __fmul_rn(s[nt][e], scale_log2) : -INFINITY;
              s[nt][e] = v;
              mt[e >> 1] = fmaxf(mt[e >> 1], v);
            }
          float c[2], ref[2];
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            mt[i] = fmaxf(mt[i], __shfl_xor_sync(kFull, mt[i], 1));
            mt[i] = fmaxf(mt[i], __shfl_xor_sync(kFull, mt[i], 2));
            const float m_new = fmaxf(m[i], mt[i]);
            ref[i] = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing yet stays 0
            c[i] = m[i] == m_new ? 1.0f : exp2f(__fsub_rn(m[i], ref[i]));
            m[i] = m_new;
          }
          // p = 2^(s - m): exact 0 where masked; row sums in one fixed order.
          float ts[2] = {0.0f, 0.0f};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int i = e >> 1;
              const float p = s[nt][e] == -INFINITY ? 0.0f : exp2f(__fsub_rn(s[nt][e], ref[i]));
              s[nt][e] = p;
              ts[i] = __fadd_rn(ts[i], p);
            }
          if (a.tc_layout_dependent) {  // tests' negative control: rows gq + 8 sum backwards
            ts[1] = 0.0f;
#pragma unroll
            for (int nt = NT - 1; nt >= 0; --nt) {
              ts[1] = __fadd_rn(ts[1], s[nt][3]);
              ts[1] = __fadd_rn(ts[1], s[nt][2]);
            }
          }
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            ts[i] = __fadd_rn(ts[i], __shfl_xor_sync(kFull, ts[i], 1));
            ts[i] = __fadd_rn(ts[i], __shfl_xor_sync(kFull, ts[i], 2));
            l[i] = __fadd_rn(__fmul_rn(l[i], c[i]), ts[i]);
          }
#pragma unroll
          for (int dt = 0; dt < DT; ++dt) {
            o[dt][0] = __fmul_rn(o[dt][0], c[0]);
            o[dt][1] = __fmul_rn(o[dt][1], c[0]);
            o[dt][2] = __fmul_rn(o[dt][2], c[1]);
            o[dt][3] = __fmul_rn(o[dt][3], c[1]);
          }
          // o += P (bf16) · V: the S accumulators are P's A fragments, 16 positions a k-step.
#pragma unroll
          for (int j = 0; j < kKvTile / 16; ++j) {
            const uint32_t pa[4] = {pack_bf16(s[2 * j][0], s[2 * j][1]),
                                    pack_bf16(s[2 * j][2], s[2 * j][3]),
                                    pack_bf16(s[2 * j + 1][0], s[2 * j + 1][1]),
                                    pack_bf16(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
            for (int dt = 0; dt < DT; dt += 2) {
              uint32_t r[4];
              ldmatrix_x4_trans(r,
                                vb + (j * 16 + (ldm & 1) * 8 + ldr) * LD + (dt + (ldm >> 1)) * 8);
              mma_bf16(o[dt], pa, r[0], r[1]);
              mma_bf16(o[dt + 1], pa, r[2], r[3]);
            }
          }
        }
        __syncthreads();  // buffer f & 1 is free for tile f + 2
        if ((start + kKvTile) % kTcSplit != 0 && f + 1 < n_tiles) continue;
          // The end of split z: rows whose position reaches it merge (or store) its state.
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (lim[i] < first) continue;
          if (split_blocks) {
            float* part =
                partials +
                ((static_cast<int64_t>(row_t[i]) * a.n_heads + row_h[i]) * max_splits + z) *
                    (HD + 2);
            if (cq == 0) {
              part[0] = m[i];
              part[1] = l[i];
            }
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
              part[2 + dt * 8 + 2 * cq] = o[dt][2 * i];
              part[2 + dt * 8 + 2 * cq + 1] = o[dt][2 * i + 1];
            }
          } else {
            const MergeWeights w = merge_state(M[i], L[i], m[i], l[i]);
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
              O[dt][2 * i] = merge_value(O[dt][2 * i], o[dt][2 * i], w);
              O[dt][2 * i + 1] = merge_value(O[dt][2 * i + 1], o[dt][2 * i + 1], w);
            }
          }
        }
      }
    }
    seg_begin = seg_end;
  }
  if (split_blocks) return;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!row_ok[i]) continue;
    const int64_t at = (static_cast<int64_t>(row_t[i]) * a.n_heads + row_h[i]) * HD;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      const float2 v =
          make_float2(__fdiv_rn(O[dt][2 * i], L[i]), __fdiv_rn(O[dt][2 * i + 1], L[i]));
      if (a.out_bf16 != nullptr) {  // the fp32 value rounded once, as the GEMM would round it
        const __nv_bfloat162 b = __floats2bfloat162_rn(v.x, v.y);
        *reinterpret_cast<__nv_bfloat162*>(a.out_bf16 + at + dt * 8 + 2 * cq) = b;
      } else {
        *reinterpret_cast<float2*>(a.out + at + dt * 8 + 2 * cq) = v;
      }
    }
  }
}

// One warp per (token, head) row: merges its split partials in order 0, 1, … with the same
// merge_state/merge_value as the in-CTA path.
template <int HD>
__global__ void attention_tc_merge_kernel(const AttentionArgs a, const float* partials,
                                          int max_splits) {
  constexpr int PER_LANE = (HD + 31) / 32;
  const int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + (threadIdx.x >> 5);
  if (row >= static_cast<int64_t>(a.n_tokens) * a.n_heads) return;
  const int lane = threadIdx.x & 31;
  const int t = static_cast<int>(row / a.n_heads);
  const int n_splits = a.positions[t] / kTcSplit + 1;
  float M = -INFINITY, L = 0.0f, O[PER_LANE];
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) O[i] = 0.0f;
  for (int z = 0; z < n_splits; ++z) {
    const float* part = partials + (row * max_splits + z) * (HD + 2);
    const MergeWeights w = merge_state(M, L, part[0], part[1]);
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      const int d = lane + 32 * i;
      if (d < HD) O[i] = merge_value(O[i], part[2 + d], w);
    }
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

int max_splits_of(const AttentionArgs& a) {
  const int64_t max_len = static_cast<int64_t>(a.max_blocks) * a.block_size;
  return static_cast<int>((max_len + kTcSplit - 1) / kTcSplit);
}

// The CTA shape: W warps (16 rows each) and tq tokens per CTA. Decode-like steps (few query
// tokens per sequence): one token per CTA. Otherwise 4 warps of packed tokens. Any shape gives the
// same bits (rows are independent; see the file comment).
struct TcShape {
  int warps, tq;
};
TcShape tc_shape(const AttentionArgs& a, int n_seqs, int force_warps) {
  const int n_rep = a.n_heads / a.n_kv_heads;
  int warps = force_warps;
  const bool decode_like = a.n_tokens <= 2 * n_seqs;
  if (warps <= 0) warps = 4;
  if (warps * kWarpRows < n_rep) warps = 4;
  // Decode-like: one token per CTA (its heads in warp 0; the other warps help copy K/V).
  const int tq = warps == 1 || decode_like ? 1 : (warps * kWarpRows) / n_rep;
  return {warps, tq};
}

bool use_split_blocks(const AttentionArgs& a, const TcShape& shape, int force_split) {
  if (force_split >= 0) return force_split == 1;
  const int64_t ctas = static_cast<int64_t>((a.n_tokens + shape.tq - 1) / shape.tq) * a.n_kv_heads;
  const size_t scratch =
      sizeof(float) * a.n_tokens * a.n_heads * max_splits_of(a) * (a.head_dim + 2);
  return ctas < kMaxCtasInBlock && max_splits_of(a) > 1 && scratch <= kMaxSplitScratch;
}

template <int HD, int W>
cudaError_t launch_tc(const AttentionArgs& a, int tq, float* scratch, bool split,
                      cudaStream_t stream) {
  const int max_splits = max_splits_of(a);
  const size_t smem = sizeof(__nv_bfloat16) * 4 * kKvTile * (HD + 8);
  // Once per kernel and process (a host call per launch costs decode steps microseconds).
  static const cudaError_t attr =
      cudaFuncSetAttribute(attention_tc_kernel<HD, W>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem));
  cudaError_t err = attr;
  if (err != cudaSuccess) return err;
  const dim3 grid((a.n_tokens + tq - 1) / tq, a.n_kv_heads, split ? max_splits : 1);
  attention_tc_kernel<HD, W>
      <<<grid, W * 32, smem, stream>>>(a, tq, a.scale * kLog2e, scratch, max_splits, split);
  err = cudaGetLastError();
  if (err != cudaSuccess || !split) return err;
  const int64_t rows = static_cast<int64_t>(a.n_tokens) * a.n_heads;
  attention_tc_merge_kernel<HD>
      <<<static_cast<unsigned>((rows + 3) / 4), 128, 0, stream>>>(a, scratch, max_splits);
  return cudaGetLastError();
}

template <int HD>
cudaError_t launch_hd(const AttentionArgs& a, const TcShape& shape, float* scratch, bool split,
                      cudaStream_t stream) {
  if (shape.warps == 1) return launch_tc<HD, 1>(a, shape.tq, scratch, split, stream);
  return launch_tc<HD, 4>(a, shape.tq, scratch, split, stream);
}

}  // namespace

bool attention_tc_supported(int32_t head_dim, int32_t n_rep) {
  return (head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128) && n_rep >= 1 &&
         n_rep <= 4 * kWarpRows;
}

size_t attention_tc_scratch_floats(const AttentionArgs& a, int n_seqs, int force_split,
                                   int force_warps) {
  if (!use_split_blocks(a, tc_shape(a, n_seqs, force_warps), force_split)) return 0;
  return static_cast<size_t>(a.n_tokens) * a.n_heads * max_splits_of(a) * (a.head_dim + 2);
}

cudaError_t launch_attention_tc(const AttentionArgs& a, int n_seqs, float* scratch, int force_split,
                                int force_warps, cudaStream_t stream) {
  if (a.n_tokens == 0) return cudaSuccess;
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0 ||
      !attention_tc_supported(a.head_dim, a.n_heads / a.n_kv_heads) || a.k_bf16 == nullptr ||
      a.v_bf16 == nullptr)
    return cudaErrorInvalidValue;
  const TcShape shape = tc_shape(a, n_seqs, force_warps);
  const bool split = use_split_blocks(a, shape, force_split);
  if (split && scratch == nullptr) return cudaErrorInvalidValue;
  switch (a.head_dim) {
    case 16:
      return launch_hd<16>(a, shape, scratch, split, stream);
    case 32:
      return launch_hd<32>(a, shape, scratch, split, stream);
    case 64:
      return launch_hd<64>(a, shape, scratch, split, stream);
    default:
      return launch_hd<128>(a, shape, scratch, split, stream);
  }
}

}  // namespace detllm::kernels::cuda
