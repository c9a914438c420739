// The packed CTA of the tensor-core attention (launched by attention_tc.cu; its invariance
// argument is at the top of that file), in a header so that the tests' negative control
// (tests/cuda/attention_negative_control.cu) can instantiate it with NEG = true; the library
// instantiates NEG = false only.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_fp8_load.cuh"
#include "kernels/cuda/attention_tc_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda::tc {

// grid (ceil(n_tokens / tq), n_kv_heads, split_blocks ? max_splits : 1), block W warps.
// CTA x holds tokens [x·tq, x·tq + tq) (heaviest last tokens first: x is reversed) × the n_rep
// query heads of kv head blockIdx.y: row r = (token r / n_rep, head r % n_rep), warp r / 16.
// Rows of one mma tile share K/V, so the CTA walks the runs of tokens of one sequence
// (segments) one after another; rows outside the segment are fully masked meanwhile.
// ST: K/V tiles in the ring (2: the original two-sync pipeline; 3: one sync a tile, two tiles
// in flight). FAST: tiles unmasked for all of the warp's rows take tile_qk + tile_softmax<HD,
// false> (no mask selects; the same values), others tile_scores. NEG: the tests' negative
// control (tile_exp_sum's LD), instantiated only in tests/cuda/attention_negative_control.cu.
// KV8: an FP8 cache (a.k_fp8, a.v_fp8): each tile row loaded as bf16(dec(code) · scale[g])
// (attention_fp8_load.cuh) into the same tiles, so everything after the load is the bf16 path.
template <int HD, int W, int ST = 2, bool FAST = false, bool NEG = false, bool KV8 = false>
__global__ void __launch_bounds__(W * 32)
    attention_tc_kernel(const AttentionArgs a, int tq, float scale_log2, float* partials,
                        int max_splits, bool split_blocks) {
  constexpr int LD = kLd<HD>;
  constexpr int DT = HD / 8;  // n-tiles of O
  constexpr int CH = HD / 8;  // 16-byte chunks of one K/V row
  static_assert(HD % 16 == 0 && DT % 2 == 0, "head_dim is whole k-steps");
  constexpr int kRowsPerPass = W * 32 / CH;  // K/V rows one pass of the CTA's threads copies
  static_assert(W * 32 % CH == 0 && kKvTile % kRowsPerPass == 0, "whole rows per pass");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* kbuf = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // ST × (kKvTile, LD)
  __nv_bfloat16* vbuf = kbuf + ST * kKvTile * LD;                    // ST × (kKvTile, LD)

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gq = lane >> 2, cq = lane & 3;  // fragment row group and column pair
  const int g = blockIdx.y;
  const int n_rep = a.n_heads / a.n_kv_heads;
  const int t_begin = (gridDim.x - 1 - blockIdx.x) * tq;
  const int t_end = min(t_begin + tq, a.n_tokens);

  const PackedRows<HD> rows(a, warp, gq, t_begin, t_end, tq, g, n_rep);  // gq and gq + 8
  uint32_t qf[HD / 16][4];
  load_q_fragments<HD>(qf, rows.q, cq);

  float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f};  // merged splits
  float O[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) O[dt][0] = O[dt][1] = O[dt][2] = O[dt][3] = 0.0f;

  const uint32_t row_elems = static_cast<uint32_t>(a.n_kv_heads) * HD;  // elements per slot
  const int block_shift = block_shift_of(a.block_size);
  const float k_scale = KV8 ? a.k_scale[g] : 0.0f, v_scale = KV8 ? a.v_scale[g] : 0.0f;

  for (int seg_begin = t_begin; seg_begin < t_end;) {
    const SegmentSplits sg = segment_splits(a, seg_begin, t_end, split_blocks);
    const int seg_end = sg.end, max_pos = sg.max_pos, n_splits = sg.n_splits;
    const int z_begin = sg.z_begin, z_end = sg.z_end;
    const int* table = sg.table;
    int lim[2];  // the row's last position in this segment, -1 = not in it
    rows.limits(seg_begin, seg_end, lim);
    const int warp_lim = warp_max(max(lim[0], lim[1]));
    // FAST: the warp's smallest row limit
    const int warp_lo = FAST ? warp_min(min(lim[0], lim[1])) : -1;
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
        // Past range_end: zeros, never the cache (V must be finite where p = 0).
        const int s0 = kv_slot(table, start + lane, range_end, a.block_size, block_shift);
        const int s1 = kv_slot(table, start + 32 + lane, range_end, a.block_size, block_shift);
        const int d = (threadIdx.x % CH) * 8;
#pragma unroll
        for (int k = 0; k < kKvTile / kRowsPerPass; ++k) {
          const int j = threadIdx.x / CH + kRowsPerPass * k;
          const int a0 = __shfl_sync(kFull, s0, j & 31), a1 = __shfl_sync(kFull, s1, j & 31);
          const int slot = j < 32 ? a0 : a1;
          if constexpr (KV8) {
            load_fp8_chunk(kb + j * LD + d, a.k_fp8 + g * HD + d, slot, row_elems, k_scale);
            load_fp8_chunk(vb + j * LD + d, a.v_fp8 + g * HD + d, slot, row_elems, v_scale);
          } else {
            copy_chunk(kb + j * LD + d, a.k_bf16 + g * HD + d, slot, row_elems);
            copy_chunk(vb + j * LD + d, a.v_bf16 + g * HD + d, slot, row_elems);
          }
        }
      };
      SplitState<HD> st;  // this split
      st.reset();

      load_tile(0, range_begin);  // n_tiles ≥ 1
      cp_async_commit();
#pragma unroll
      for (int p = 1; p < ST - 1; ++p) {
        if (p < n_tiles) load_tile(p, range_begin + p * kKvTile);
        cp_async_commit();
      }
      int buf = 0;  // tile f's slot of the ring
      for (int f = 0; f < n_tiles; ++f) {
        const int start = range_begin + f * kKvTile;
        const int z = start / kTcSplit, first = z * kTcSplit;  // the tile's split
        if (start == first) st.reset();  // a split starts: its state from zero
        if constexpr (ST == 2) {
          if (f + 1 < n_tiles) load_tile((f + 1) & 1, start + kKvTile);
          cp_async_commit();
          cp_async_wait<1>();  // this thread's copies of tile f have landed
          __syncthreads();     // everyone's have
        } else {
          cp_async_wait<ST - 2>();  // this thread's copies of tile f have landed
          __syncthreads();          // everyone's have, and everyone is done with tile f − 1
          const int nb = buf == 0 ? ST - 1 : buf - 1;  // tile f − 1's slot: tile f + ST − 1's
          if (f + ST - 1 < n_tiles) load_tile(nb, start + (ST - 1) * kKvTile);
          cp_async_commit();
        }
        if (warp_lim >= start) {  // else the tile is masked for every row of this warp
          float s[kKvTile / 8][4];
          const __nv_bfloat16* kb = kbuf + buf * kKvTile * LD;
          if (FAST && start + kKvTile - 1 <= warp_lo) {  // no column past any row's position
            tile_qk<HD>(kb, qf, s);
            tile_softmax<HD, false, NEG>(start, lim, scale_log2, st, s);
          } else {
            tile_scores<HD, NEG>(kb, qf, start, lim, scale_log2, st, s);
          }
          tile_values<HD>(vbuf + buf * kKvTile * LD, s, st);
        }
        buf = buf + 1 == ST ? 0 : buf + 1;
        if constexpr (ST == 2) __syncthreads();  // buffer f & 1 is free for tile f + 2
        if ((start + kKvTile) % kTcSplit != 0 && f + 1 < n_tiles) continue;
        // The end of split z: rows whose position reaches it merge (or store) its state.
        end_split<HD>(a, rows, lim, first, z, split_blocks, partials, max_splits, st, M, L, O);
      }
    }
    if constexpr (ST > 2) __syncthreads();  // the ring is free for the next segment's tiles
    seg_begin = seg_end;
  }
  if (split_blocks) return;  // the merge kernel folds the partials
  store_rows<HD>(a, rows, O, L, cq);
}

}  // namespace detllm::kernels::cuda::tc
