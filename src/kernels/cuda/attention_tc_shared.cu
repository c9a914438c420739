// The shared-split CTA: the four warps of a CTA share each KV split, a tile each — the packed
// schedule (attention_tc.cu) for steps whose CTA holds at most 16 rows, chosen for decode-like
// steps of few (token, KV head, split) items (batch 1–8 at short and middle contexts), where the
// packed CTA has one computing warp that runs the split's four tiles one after another while
// three warps only copy. Nsight Compute on the 8B batch-1 step (docs/cuda.md, "The shared-split
// CTA") found that one warp's instruction chain to be the kernel's time (≈ 8,000 warp
// instructions a CTA, one issued every 7.7 cycles, DRAM at 3% of peak).
//
// A split is kTcSplit / kKvTile = 4 tiles; for each split of the CTA's rows:
//   phase A, warp w = tile w: copies its K and V tile (cp.async, its own commit groups), makes
//           the tile's scores S = Q·Kᵀ (tile_qk), scales and masks them and takes the tile's row
//           max (tile_row_max), as the one-warp tile does; the four tiles' row maxes meet in
//           shared memory, and warp w's running max before its tile is the fold of tiles 0…w−1
//           (max is exact: the one-warp chain's very values); then c, P and the tile's row sum
//           (tile_exp_sum: the thread's 16 values in ascending column order, then
//           xor-shuffles 1, 2; the tests' negative control too), P rounded to bf16 into shared
//           memory in the fragment layout;
//   phase B, warp w = O columns [32w, 32w + 32) (head_dim 128; fewer warps at smaller
//           head_dim): the split's chain in tile order, as the one-warp tile runs it — l = l·c +
//           ts, O rescaled by c (rescale_o's skip), then P·V k-steps ascending.
// Each per-tile value is the one-warp tile's, and the chains (m, l, O over the tiles; S and O
// over the k-steps) run in the same order: the bits of the packed CTAs and the decode warps.
// A split ends in store_partial's layout (warp 0 writes m, l; each warp its columns of o) or
// is merged in order by merge_state / merge_value. CudaAttentionTc.BitIdenticalAcross… forces it
// on every step, both split placements. (A CTA per split is merged by the merge kernel; the
// merge in the group's last CTA and the cluster merge were measured no faster and removed,
// docs/cuda.md.)
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_tc_common.cuh"
#include "kernels/cuda/attention_tc_shared.h"

namespace detllm::kernels::cuda {
namespace {

using namespace tc;

constexpr int kWarps = 4;
static_assert(kTcSplit / kKvTile == kWarps, "a warp for each tile of a split");

// A warp's n8 tiles of O: a quarter of head_dim, at least a pair (ldmatrix x4.trans); warps
// past head_dim / 8 hold none (head_dim 16: warp 0 only; 32: warps 0 and 1).
template <int HD>
constexpr int kOTilesPerWarp = HD / 8 / kWarps >= 2 ? HD / 8 / kWarps : 2;

// Shared memory: the split's K and V tiles, P's fragments of each tile (bf16, [tile][k-step]
// [lane]), and each tile's row max, row sum and O factor ([tile][row]).
template <int HD>
struct SplitSmem {
  static constexpr size_t kTile = size_t(kKvTile) * kLd<HD>;  // bf16 elements of one tile
  static constexpr size_t kBytes = sizeof(__nv_bfloat16) * 2 * kWarps * kTile +
                                   sizeof(uint4) * kWarps * (kKvTile / 16) * 32 +
                                   sizeof(float) * 3 * kWarps * kWarpRows;
  __nv_bfloat16* k;
  __nv_bfloat16* v;
  uint4* p;
  float *tmax, *tsum, *tc;
  __device__ __forceinline__ explicit SplitSmem(unsigned char* raw)
      : k(reinterpret_cast<__nv_bfloat16*>(raw)),
        v(k + kWarps * kTile),
        p(reinterpret_cast<uint4*>(v + kWarps * kTile)),
        tmax(reinterpret_cast<float*>(p + kWarps * (kKvTile / 16) * 32)),
        tsum(tmax + kWarps * kWarpRows),
        tc(tsum + kWarps * kWarpRows) {}
};

// One split's state in a warp: the rows' (m, l) (the same in every warp) and its columns of o.
template <int HD>
struct WarpSplit {
  static constexpr int DTW = kOTilesPerWarp<HD>;
  float m[2], l[2];
  float o[DTW][4];
  __device__ __forceinline__ void reset() {
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
#pragma unroll
    for (int d = 0; d < DTW; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  }
};

// grid (ceil(n_tokens / tq), n_kv_heads, split_blocks ? max_splits : 1), block 4 warps; CTA x
// holds tokens [x·tq, x·tq + tq) (reversed, as attention_tc_kernel) × the n_rep query heads of
// KV head blockIdx.y: tq·n_rep ≤ 16 rows, the same rows in every warp.
template <int HD>
__global__ void __launch_bounds__(kWarps * 32)
    attention_tc_shared_kernel(const AttentionArgs a, int tq, float scale_log2, float* partials,
                               int max_splits, bool split_blocks) {
  constexpr int LD = kLd<HD>;
  constexpr int CH = HD / 8;    // 16-byte chunks of one K/V row
  constexpr int RPW = 32 / CH;  // rows one pass of a warp copies
  constexpr int DT = HD / 8;    // n8 tiles of O
  constexpr int DTW = kOTilesPerWarp<HD>;
  constexpr int KS = kKvTile / 16;  // P·V k-steps of a tile
  static_assert(HD % 16 == 0 && 32 % CH == 0 && kKvTile % RPW == 0, "whole rows per pass");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const SplitSmem<HD> sm(smem_raw);

  pdl_wait();  // launched with PDL when a.pdl (pdl.cuh)
  pdl_release();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gq = lane >> 2, cq = lane & 3;
  const int ldm = lane >> 3, ldr = lane & 7;
  const int g = blockIdx.y;
  const int n_rep = a.n_heads / a.n_kv_heads;
  const int t_begin = (gridDim.x - 1 - blockIdx.x) * tq;
  const int t_end = min(t_begin + tq, a.n_tokens);
  const int dt0 = warp * DTW;   // the warp's first n8 tile of O
  const bool has_o = dt0 < DT;  // warp-uniform

  const PackedRows<HD> rows(a, 0, gq, t_begin, t_end, tq, g, n_rep);  // rows gq and gq + 8
  uint32_t qf[HD / 16][4];
  load_q_fragments<HD>(qf, rows.q, cq);

  float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f};  // merged splits
  float O[DTW][4];
#pragma unroll
  for (int d = 0; d < DTW; ++d) O[d][0] = O[d][1] = O[d][2] = O[d][3] = 0.0f;

  const uint32_t row_elems = static_cast<uint32_t>(a.n_kv_heads) * HD;  // elements per slot
  const int block_shift = block_shift_of(a.block_size);
  __nv_bfloat16* kw = sm.k + warp * SplitSmem<HD>::kTile;  // the warp's tile (phase A)
  __nv_bfloat16* vw = sm.v + warp * SplitSmem<HD>::kTile;

  for (int seg_begin = t_begin; seg_begin < t_end;) {
    const SegmentSplits sg = segment_splits(a, seg_begin, t_end, split_blocks);
    const int seg_end = sg.end, max_pos = sg.max_pos;
    const int z_begin = sg.z_begin, z_end = min(sg.z_end, sg.n_splits);
    const int* table = sg.table;
    int lim[2];  // the row's last position in this segment, -1 = not in it
    rows.limits(seg_begin, seg_end, lim);
    // every warp holds the same rows: CTA-uniform
    const int cta_lim = warp_max(max(lim[0], lim[1]));
    for (int z = z_begin; z < z_end; ++z) {
      const int first = z * kTcSplit;
      const int range_end = min(first + kTcSplit, max_pos + 1);
      const int n_tiles = (range_end - first + kKvTile - 1) / kKvTile;
      // ---- phase A: warp w makes tile w's scores, its row max, then P and its row sum.
      const int start = first + warp * kKvTile;
      const bool own = warp < n_tiles;              // warp-uniform
      const bool active = own && cta_lim >= start;  // else no row sees the tile
      if (own) {  // K, then V, of the warp's tile (past range_end: zeros, never the cache)
        const int s0 = kv_slot(table, start + lane, range_end, a.block_size, block_shift);
        const int s1 = kv_slot(table, start + 32 + lane, range_end, a.block_size, block_shift);
        const int d = (lane % CH) * 8;
#pragma unroll
        for (int kv = 0; kv < 2; ++kv) {
          __nv_bfloat16* dst = kv == 0 ? kw : vw;
          const uint16_t* src = (kv == 0 ? a.k_bf16 : a.v_bf16) + g * HD + d;
#pragma unroll
          for (int k = 0; k < kKvTile / RPW; ++k) {
            const int j = lane / CH + RPW * k;
            const int a0 = __shfl_sync(kFull, s0, j & 31), a1 = __shfl_sync(kFull, s1, j & 31);
            copy_chunk(dst + j * LD + d, src, j < 32 ? a0 : a1, row_elems);
          }
          cp_async_commit();
        }
      }
      float s[kKvTile / 8][4];
      float mt[2] = {-INFINITY, -INFINITY};
      if (active) {
        cp_async_wait<1>();  // the thread's K copies have landed (V may be in flight)
        __syncwarp();        // the warp's have
        tile_qk<HD>(kw, qf, s);
        tile_row_max<true, 2>(start, lim, scale_log2, s, mt);
      }
      if (cq == 0) {
        sm.tmax[warp * kWarpRows + gq] = mt[0];
        sm.tmax[warp * kWarpRows + gq + 8] = mt[1];
      }
      __syncthreads();  // every tile's row max is in
      if (active) {
        // The running max before tile w (tiles 0 … w − 1; a tile no row sees left −inf, which
        // leaves a max as it is) and with it: the one-warp chain's values.
        float m_prev[2], m_new[2], c[2], ts[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          m_prev[i] = -INFINITY;
          for (int f = 0; f < warp; ++f)
            m_prev[i] = fmaxf(m_prev[i], sm.tmax[f * kWarpRows + gq + 8 * i]);
          m_new[i] = fmaxf(m_prev[i], mt[i]);
        }
        tile_exp_sum<true, 2>(m_prev, m_new, s, c, ts);
#pragma unroll
        for (int j = 0; j < KS; ++j) {
          uint32_t pa[4];
          p_fragment(s, j, pa);
          sm.p[(warp * KS + j) * 32 + lane] = make_uint4(pa[0], pa[1], pa[2], pa[3]);
        }
        if (cq == 0) {
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            sm.tsum[warp * kWarpRows + gq + 8 * i] = ts[i];
            sm.tc[warp * kWarpRows + gq + 8 * i] = c[i];
          }
        }
      }
      cp_async_wait<0>();  // the thread's V copies have landed
      __syncthreads();     // every tile's P, sum, factor and V are in
      // ---- phase B: the split's chain in tile order on the warp's columns of O.
      WarpSplit<HD> st;
      st.reset();
      for (int f = 0; f < n_tiles; ++f) {
        if (cta_lim < first + f * kKvTile) continue;  // no row sees tile f: the state stays
        float c[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = f * kWarpRows + gq + 8 * i;
          c[i] = sm.tc[r];
          st.m[i] = fmaxf(st.m[i], sm.tmax[r]);
          st.l[i] = __fadd_rn(__fmul_rn(st.l[i], c[i]), sm.tsum[r]);
        }
        if (!has_o) continue;
        if (!__all_sync(kFull, c[0] == 1.0f && c[1] == 1.0f)) {  // rescale_o's skip: x·1 = x
#pragma unroll
          for (int d = 0; d < DTW; ++d) {
            st.o[d][0] = __fmul_rn(st.o[d][0], c[0]);
            st.o[d][1] = __fmul_rn(st.o[d][1], c[0]);
            st.o[d][2] = __fmul_rn(st.o[d][2], c[1]);
            st.o[d][3] = __fmul_rn(st.o[d][3], c[1]);
          }
        }
        const __nv_bfloat16* vb = sm.v + f * SplitSmem<HD>::kTile;
#pragma unroll
        for (int j = 0; j < KS; ++j) {
          const uint4 p4 = sm.p[(f * KS + j) * 32 + lane];
          const uint32_t pa[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
          for (int d = 0; d < DTW; d += 2) {
            uint32_t r[4];
            ldmatrix_x4_trans(
                r, vb + (j * 16 + (ldm & 1) * 8 + ldr) * LD + (dt0 + d + (ldm >> 1)) * 8);
            mma_bf16(st.o[d], pa, r[0], r[1]);
            mma_bf16(st.o[d + 1], pa, r[2], r[3]);
          }
        }
      }
      // The end of split z: rows whose position reaches it store its state or merge it.
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if (lim[i] < first) continue;
        if (split_blocks) {  // store_partial's layout
          float* part = partials + (rows.row(a, i) * max_splits + z) * (HD + 2);
          if (warp == 0 && cq == 0) {
            part[0] = st.m[i];
            part[1] = st.l[i];
          }
          if (has_o) {
#pragma unroll
            for (int d = 0; d < DTW; ++d) {
              part[2 + (dt0 + d) * 8 + 2 * cq] = st.o[d][2 * i];
              part[2 + (dt0 + d) * 8 + 2 * cq + 1] = st.o[d][2 * i + 1];
            }
          }
        } else {
          const MergeWeights w = merge_state(M[i], L[i], st.m[i], st.l[i]);
#pragma unroll
          for (int d = 0; d < DTW; ++d) {
            O[d][2 * i] = merge_value(O[d][2 * i], st.o[d][2 * i], w);
            O[d][2 * i + 1] = merge_value(O[d][2 * i + 1], st.o[d][2 * i + 1], w);
          }
        }
      }
      __syncthreads();  // the split's shared memory is free for the next one
    }
    seg_begin = seg_end;
  }
  if (split_blocks) return;  // the merge kernel folds the partials
  if (!has_o) return;
    // The merged rows out (store_rows for the warp's columns): O / L, fp32 or rounded to bf16.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!rows.ok[i]) continue;
    const int64_t at = rows.row(a, i) * HD;
#pragma unroll
    for (int d = 0; d < DTW; ++d) {
      const int col = (dt0 + d) * 8 + 2 * cq;
      const float2 v = make_float2(__fdiv_rn(O[d][2 * i], L[i]), __fdiv_rn(O[d][2 * i + 1], L[i]));
      if (a.out_bf16 != nullptr) {
        *reinterpret_cast<__nv_bfloat162*>(a.out_bf16 + at + col) = __floats2bfloat162_rn(v.x, v.y);
      } else {
        *reinterpret_cast<float2*>(a.out + at + col) = v;
      }
    }
  }
}

template <int HD>
cudaError_t launch_hd(const AttentionArgs& a, int tq, float* partials, bool split,
                      cudaStream_t stream) {
  constexpr size_t smem = SplitSmem<HD>::kBytes;
  // Once per kernel and process (a host call per launch costs decode steps microseconds).
  static const cudaError_t attr = cudaFuncSetAttribute(
      attention_tc_shared_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(smem));
  if (attr != cudaSuccess) return attr;
  const int max_splits = max_splits_of(a);
  const dim3 grid((a.n_tokens + tq - 1) / tq, a.n_kv_heads, split ? max_splits : 1);
  const cudaError_t err =
      launch_pdl(a.pdl, attention_tc_shared_kernel<HD>, grid, kWarps * 32, smem, stream, a, tq,
                 a.scale * kLog2e, partials, max_splits, split);
  if (err != cudaSuccess || !split) return err;
  return launch_merge_partials<HD>(a, partials, max_splits, stream);
}

}  // namespace

cudaError_t launch_attention_tc_shared(const AttentionArgs& a, int tq, float* partials, bool split,
                                       cudaStream_t stream) {
  if (a.n_kv_heads <= 0 || tq < 1 || tq * (a.n_heads / a.n_kv_heads) > kWarpRows)
    return cudaErrorInvalidValue;
  return with_head_dim(a.head_dim, [&](auto hd) {
    return launch_hd<decltype(hd)::value>(a, tq, partials, split, stream);
  });
}

}  // namespace detllm::kernels::cuda
