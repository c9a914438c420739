// Paged causal GQA attention on the tensor cores over a bf16 KV cache (FA2 style: mma.sync
// m16n8k16, bf16 in, fp32 accumulate): the packed schedule, for prefill, chunks and mixed steps
// (decode-like steps run attention_tc_decode.cu's schedule, with the same bits: the per-tile
// arithmetic, the split grid and the merge are attention_tc_common.cuh's).
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

#include "kernels/cuda/attention_tc_common.cuh"
#include "kernels/cuda/attention_tc_shared.h"
#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {

namespace {

using namespace tc;

constexpr int kMaxCtasInBlock = 1024;  // fewer CTAs unsplit: a CTA per split instead
constexpr size_t kMaxSplitScratch = size_t(512) << 20;  // bytes of split partials at most
// The scratch starts with the split CTAs' merge counters (merge_in_last_cta: one per group of
// CTAs that share tokens and a KV head; zero between launches), then the partials. The counters
// keep their place whichever schedule ran before, so the partials never overwrite them.
constexpr int64_t kMergeCounters = kTcMergeCounters;
constexpr size_t kMergeCounterFloats = kMergeCounters;  // (4-byte counters)

// grid (ceil(n_tokens / tq), n_kv_heads, split_blocks ? max_splits : 1), block W warps.
// CTA x holds tokens [x·tq, x·tq + tq) (heaviest last tokens first: x is reversed) × the n_rep
// query heads of kv head blockIdx.y: row r = (token r / n_rep, head r % n_rep), warp r / 16.
// Rows of one mma tile share K/V, so the CTA walks the runs of tokens of one sequence
// (segments) one after another; rows outside the segment are fully masked meanwhile.
// ST: K/V tiles in the ring (2: the original two-sync pipeline; 3: one sync a tile, two tiles
// in flight). FAST: tiles unmasked for all of the warp's rows take tile_qk + tile_softmax<HD,
// false> (no mask selects; the same values), others tile_scores.
template <int HD, int W, int ST = 2, bool FAST = false>
__global__ void __launch_bounds__(W * 32)
    attention_tc_kernel(const AttentionArgs a, int tq, float scale_log2, float* partials,
                        int max_splits, bool split_blocks, unsigned int* merge_counters) {
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

  for (int seg_begin = t_begin; seg_begin < t_end;) {
    const int seq = a.seq_of_token[seg_begin];
    int max_pos;
    const int seg_end = segment_end(a, seg_begin, t_end, max_pos);
    int lim[2];  // the row's last position in this segment, -1 = not in it
    rows.limits(seg_begin, seg_end, lim);
    int warp_lim = max(lim[0], lim[1]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      warp_lim = max(warp_lim, __shfl_xor_sync(kFull, warp_lim, off));
    int warp_min = -1;  // FAST: the warp's smallest row limit
    if constexpr (FAST) {
      warp_min = min(lim[0], lim[1]);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1)
        warp_min = min(warp_min, __shfl_xor_sync(kFull, warp_min, off));
    }
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
        // Past range_end: zeros, never the cache (V must be finite where p = 0).
        const int s0 = kv_slot(table, start + lane, range_end, a.block_size, block_shift);
        const int s1 = kv_slot(table, start + 32 + lane, range_end, a.block_size, block_shift);
        const int d = (threadIdx.x % CH) * 8;
#pragma unroll
        for (int k = 0; k < kKvTile / kRowsPerPass; ++k) {
          const int j = threadIdx.x / CH + kRowsPerPass * k;
          const int a0 = __shfl_sync(kFull, s0, j & 31), a1 = __shfl_sync(kFull, s1, j & 31);
          const int slot = j < 32 ? a0 : a1;
          copy_chunk(kb + j * LD + d, a.k_bf16 + g * HD + d, slot, row_elems);
          copy_chunk(vb + j * LD + d, a.v_bf16 + g * HD + d, slot, row_elems);
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
          if (FAST && start + kKvTile - 1 <= warp_min) {  // no column past any row's position
            tile_qk<HD>(kb, qf, s);
            tile_softmax<HD, false>(start, lim, scale_log2, a.tc_layout_dependent, st, s);
          } else {
            tile_scores<HD>(kb, qf, start, lim, scale_log2, a.tc_layout_dependent, st, s);
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
  if (split_blocks) {
    // merge_counters: the last of the group's gridDim.z CTAs merges (else the merge kernel).
    if (merge_counters != nullptr)
      merge_in_last_cta<HD, W>(a, partials, max_splits,
                               merge_counters + static_cast<int64_t>(g) * gridDim.x + blockIdx.x,
                               gridDim.z, t_begin, t_end, g, n_rep);
    return;
  }
  store_rows<HD>(a, rows, O, L, cq);
}

// The 32-row warps: the same grid and per-row arithmetic as attention_tc_kernel, with MT
// m-tiles of 16 rows per warp sharing each K/V fragment (tile_scores_mt / tile_values_mt: one
// ldmatrix feeds MT mma instead of one), Q staged once in shared memory (bf16) and the merged
// state (M, L, O) in shared memory (a thread's own elements: no sharing within a stream), so
// that the registers hold only the split's state. W warps × MT m-tiles hold R rows: row r =
// (token r / n_rep, head r % n_rep) as in attention_tc_kernel; warp w's m-tile j holds rows
// (w % W · MT + j) · 16 + the m16n8 fragment rows.
// P streams of W warps each: stream s runs the splits z ≡ s (mod P) of the CTA's range over the
// same rows (P = 2: 8 warps, two per SM sub-partition, one's softmax beside the other's mma),
// each stream with its own ring of ST K/V tiles (ST − 1 in flight) that only its warps copy
// and wait for (one barrier of the stream's warps a tile: the streams run decoupled). At the
// end of split z a warp merges it into (M, L, O) after its partner warp (the other stream's
// warp of the same rows) merged split z − 1 (turn[rows] = z, in shared memory): the same
// merge_state / merge_value sequence, in ascending z, as one stream. SWZ: tiles and Q swizzled
// instead of padded (the P = 2 rings fit in shared memory).
template <int HD, int W, int MT, int ST, int P, bool SWZ>
constexpr size_t mt_smem_bytes() {
  constexpr int R = W * MT * kWarpRows;
  constexpr int row = SWZ ? HD : kLd<HD>;
  return sizeof(float) * R * (HD + 2) + sizeof(__nv_bfloat16) * (R + P * 2 * ST * kKvTile) * row +
         16 * sizeof(int);
}

template <int HD, int W, int MT, int ST, int P, bool SWZ>
__global__ void __launch_bounds__(W * P * 32, 1)
    attention_tc_mt_kernel(const AttentionArgs a, int tq, float scale_log2, float* partials,
                           int max_splits, bool split_blocks) {
  constexpr int ROW = SWZ ? HD : kLd<HD>;  // bf16 elements a tile row takes
  constexpr int TILE = kKvTile * ROW;
  constexpr int DT = HD / 8;  // n-tiles of O
  constexpr int CH = HD / 8;  // 16-byte chunks of one K/V row
  constexpr int R = W * MT * kWarpRows;
  constexpr int NTH = W * P * 32;
  constexpr int kStepsPerSplit = kTcSplit / kKvTile;
  static_assert(HD % 16 == 0 && DT % 2 == 0, "head_dim is whole k-steps");
  static_assert(ST >= 2 && (P == 1 || P == 2), "a ring of at least two tiles; 1 or 2 streams");
  constexpr int kRowsPerPass = W * 32 / CH;  // K/V rows a stream copies per pass
  static_assert(W * 32 % CH == 0 && kKvTile % kRowsPerPass == 0, "whole rows per pass");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* os = reinterpret_cast<float*>(smem_raw);  // merged O: [rw · MT + j][dt][lane][4]
  float* ms = os + R * HD;                         // merged (M, L) of row r: ms[2r], ms[2r + 1]
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(ms + 2 * R);  // R rows
  __nv_bfloat16* ring = qs + R * ROW;  // ST × P tiles of K, then ST × P of V
  __nv_bfloat16* vring = ring + ST * P * TILE;
  int* turn = reinterpret_cast<int*>(vring + ST * P * TILE);  // P = 2: the next split to merge, by rows

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int stream = warp / W, rw = warp % W;  // rw: the warp's rows
  const int ts = threadIdx.x % (W * 32);        // the thread in its stream
  // The stream's barrier: its W warps only (P = 2: named barriers 1 and 2).
  auto stream_sync = [&] {
    if constexpr (P == 1) {
      __syncthreads();
    } else {
      asm volatile("bar.sync %0, %1;\n" ::"r"(1 + stream), "n"(W * 32) : "memory");
    }
  };
  const int gq = lane >> 2, cq = lane & 3;
  const int g = blockIdx.y;
  const int n_rep = a.n_heads / a.n_kv_heads;
  const int t_begin = (gridDim.x - 1 - blockIdx.x) * tq;
  const int t_end = min(t_begin + tq, a.n_tokens);

  // Q rounded to bf16 once (the same rounding as load_q_fragments), zeros where no row.
  for (int idx = threadIdx.x; idx < R * (HD / 2); idx += NTH) {
    const int r = idx / (HD / 2), d = (idx % (HD / 2)) * 2;
    const int t = t_begin + r / n_rep;
    float2 v = make_float2(0.0f, 0.0f);
    if (r < tq * n_rep && t < t_end)
      v = *reinterpret_cast<const float2*>(
          a.q + (static_cast<int64_t>(t) * a.n_heads + g * n_rep + r % n_rep) * HD + d);
    *reinterpret_cast<uint32_t*>(qs + tile_at<HD, SWZ>(r, d & ~7) + (d & 7)) = pack_bf16(v.x, v.y);
  }
  float* ow = os + (rw * MT) * DT * 128 + lane * 4;  // the thread's O: ow[(j·DT + dt)·128 + e]
  if (!split_blocks && stream == 0) {
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int dt = 0; dt < DT; ++dt)
        *reinterpret_cast<float4*>(ow + (j * DT + dt) * 128) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (cq == 0)
#pragma unroll
      for (int j = 0; j < MT; ++j)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = (rw * MT + j) * kWarpRows + gq + 8 * i;
          ms[2 * r] = -INFINITY;
          ms[2 * r + 1] = 0.0f;
        }
  }
  __syncthreads();
  const __nv_bfloat16* qw = qs + rw * MT * kWarpRows * ROW;

  // The thread's rows: gq and gq + 8 of each of the warp's m-tiles. row_of: (t · n_heads + h).
  auto row_index = [&](int j, int i) { return (rw * MT + j) * kWarpRows + gq + 8 * i; };
  auto row_token = [&](int j, int i) { return t_begin + row_index(j, i) / n_rep; };
  auto row_of = [&](int j, int i) {
    return static_cast<int64_t>(row_token(j, i)) * a.n_heads + g * n_rep + row_index(j, i) % n_rep;
  };
  int row_pos[MT][2];  // -1: no row
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int t = row_token(j, i);
      row_pos[j][i] = row_index(j, i) < tq * n_rep && t < t_end ? a.positions[t] : -1;
    }

  const uint32_t row_elems = static_cast<uint32_t>(a.n_kv_heads) * HD;  // elements per slot
  const int block_shift = block_shift_of(a.block_size);

  for (int seg_begin = t_begin; seg_begin < t_end;) {
    const int seq = a.seq_of_token[seg_begin];
    int max_pos;
    const int seg_end = segment_end(a, seg_begin, t_end, max_pos);
    int lim[MT][2];  // the row's last position in this segment, -1 = not in it
    int warp_lim = -1, tile_min[MT];
#pragma unroll
    for (int j = 0; j < MT; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int t = row_token(j, i);
        lim[j][i] = row_pos[j][i] >= 0 && t >= seg_begin && t < seg_end ? row_pos[j][i] : -1;
        warp_lim = max(warp_lim, lim[j][i]);
      }
      tile_min[j] = min(lim[j][0], lim[j][1]);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1)
        tile_min[j] = min(tile_min[j], __shfl_xor_sync(kFull, tile_min[j], off));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      warp_lim = max(warp_lim, __shfl_xor_sync(kFull, warp_lim, off));
    const int n_splits = max_pos / kTcSplit + 1;
    int z_begin = 0, z_end = n_splits;
    if (split_blocks) {  // a CTA per round of P splits
      z_begin = blockIdx.z * P;
      z_end = z_begin + P;
    }
    const int* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks;
    if (z_begin >= n_splits) {  // a CTA per round: this segment has no such splits
      seg_begin = seg_end;
      continue;
    }
    // The CTA's positions [z_begin · kTcSplit, range_end); this stream's splits z_begin +
    // stream, + P, … ≤ z_last, their tiles in one pipeline (across split edges too).
    const int range_end = min(min(z_end, n_splits) * kTcSplit, max_pos + 1);
    const int z_last = (range_end - 1) / kTcSplit;
    const int z_first = z_begin + stream;
    int n_tiles = 0;
    if (z_first <= z_last) {
      const int count = (z_last - z_first) / P + 1;
      n_tiles = (count - 1) * kStepsPerSplit +
                (z_first + (count - 1) * P == z_last ? ((range_end - 1) % kTcSplit) / kKvTile + 1
                                                     : kStepsPerSplit);
    }
    auto tile_start = [&](int f) {
      return (z_first + (f / kStepsPerSplit) * P) * kTcSplit + (f % kStepsPerSplit) * kKvTile;
    };
    if constexpr (P == 2) {  // the merges of this segment start at split 0
      if (threadIdx.x < W) turn[threadIdx.x] = 0;
      __syncthreads();
    }
    // The stream's threads copy its tiles. Lane j of every warp looks up the slots of
    // positions start + j and start + 32 + j (-1 past range_end); the copies take them by
    // shuffle: one table read per position.
    auto load_tile = [&](int b, int start) {
      __nv_bfloat16* kb = ring + (b * P + stream) * TILE;
      __nv_bfloat16* vb = vring + (b * P + stream) * TILE;
      // Past range_end: zeros, never the cache (V must be finite where p = 0).
      const int s0 = kv_slot(table, start + lane, range_end, a.block_size, block_shift);
      const int s1 = kv_slot(table, start + 32 + lane, range_end, a.block_size, block_shift);
      const int d = (ts % CH) * 8;
#pragma unroll
      for (int k = 0; k < kKvTile / kRowsPerPass; ++k) {
        const int jr = ts / CH + kRowsPerPass * k;
        const int a0 = __shfl_sync(kFull, s0, jr & 31), a1 = __shfl_sync(kFull, s1, jr & 31);
        const int slot = jr < 32 ? a0 : a1;
        const int at = tile_at<HD, SWZ>(jr, d);
        copy_chunk(kb + at, a.k_bf16 + g * HD + d, slot, row_elems);
        copy_chunk(vb + at, a.v_bf16 + g * HD + d, slot, row_elems);
      }
    };
    SplitState<HD> st[MT];
#pragma unroll
    for (int p = 0; p < ST - 1; ++p) {
      if (p < n_tiles) load_tile(p, tile_start(p));
      cp_async_commit();
    }
    int buf = 0, next_buf = ST - 1;  // tile f's ring slot, tile f + ST − 1's
    for (int f = 0; f < n_tiles; ++f) {
      const int start = tile_start(f);
      const int z = start / kTcSplit, first = z * kTcSplit;  // the tile's split
      if (f % kStepsPerSplit == 0) {  // a split starts: its state from zero
#pragma unroll
        for (int j = 0; j < MT; ++j) st[j].reset();
      }
      cp_async_wait<ST - 2>();  // this thread's copies of tile f have landed
      stream_sync();            // the stream's have, and it is done with tile f − 1
      if (f + ST - 1 < n_tiles) load_tile(next_buf, tile_start(f + ST - 1));
      cp_async_commit();
      if (warp_lim >= start) {  // else the tile is masked for every row of this warp
        bool mask[MT];
#pragma unroll
        for (int j = 0; j < MT; ++j) mask[j] = start + kKvTile - 1 > tile_min[j];
        const int at = (buf * P + stream) * TILE;
        float s[MT][kKvTile / 8][4];
        tile_scores_mt<HD, MT, SWZ>(ring + at, qw, start, lim, mask, scale_log2,
                                    a.tc_layout_dependent, st, s);
        tile_values_mt<HD, MT, SWZ>(vring + at, s, st);
      }
      buf = buf + 1 == ST ? 0 : buf + 1;
      next_buf = next_buf + 1 == ST ? 0 : next_buf + 1;
      if (f % kStepsPerSplit != kStepsPerSplit - 1 && f + 1 < n_tiles) continue;
      // The end of split z: rows whose position reaches it store its state, or merge it into
      // (M, L, O) — with two streams after the partner warp (same rows) merged split z − 1.
      if (split_blocks) {
#pragma unroll
        for (int j = 0; j < MT; ++j)
#pragma unroll
          for (int i = 0; i < 2; ++i)
            if (lim[j][i] >= first)
              store_partial<HD>(partials, row_of(j, i), max_splits, z, st[j], i);
        continue;
      }
      if constexpr (P == 2) {
        if (lane == 0)
          while (*reinterpret_cast<volatile int*>(turn + rw) != z) __nanosleep(32);
        __syncwarp();
        __threadfence_block();  // the partner's merge of split z − 1 is visible
      }
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        const bool take[2] = {lim[j][0] >= first, lim[j][1] >= first};
        MergeWeights w[2] = {{1.0f, 0.0f}, {1.0f, 0.0f}};
        float M[2] = {0.0f, 0.0f}, L[2] = {0.0f, 0.0f};  // the rows' merged (M, L): quad-shared
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (!take[i]) continue;
          M[i] = ms[2 * row_index(j, i)];
          L[i] = ms[2 * row_index(j, i) + 1];
          w[i] = merge_state(M[i], L[i], st[j].m[i], st[j].l[i]);
        }
        __syncwarp();  // the quad has read (M, L) before its lane 0 writes them back
#pragma unroll
        for (int i = 0; i < 2; ++i)
          if (take[i] && cq == 0) {
            ms[2 * row_index(j, i)] = M[i];
            ms[2 * row_index(j, i) + 1] = L[i];
          }
        if (!take[0] && !take[1]) continue;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          float4* o = reinterpret_cast<float4*>(ow + (j * DT + dt) * 128);
          float4 v = *o;
          if (take[0]) {
            v.x = merge_value(v.x, st[j].o[dt][0], w[0]);
            v.y = merge_value(v.y, st[j].o[dt][1], w[0]);
          }
          if (take[1]) {
            v.z = merge_value(v.z, st[j].o[dt][2], w[1]);
            v.w = merge_value(v.w, st[j].o[dt][3], w[1]);
          }
          *o = v;
        }
      }
      if constexpr (P == 2) {
        __syncwarp();  // every lane's merge is written
        if (lane == 0) {
          __threadfence_block();
          *reinterpret_cast<volatile int*>(turn + rw) = z + 1;  // the partner's turn
        }
      }
    }
    __syncthreads();  // the ring is free for the next segment's tiles
    seg_begin = seg_end;
  }
  if (split_blocks || stream != 0) return;
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (row_pos[j][i] < 0) continue;
      const int64_t at = row_of(j, i) * HD;
      const float L = ms[2 * row_index(j, i) + 1];
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        const float2 o = *reinterpret_cast<const float2*>(ow + (j * DT + dt) * 128 + 2 * i);
        const float2 v = make_float2(__fdiv_rn(o.x, L), __fdiv_rn(o.y, L));
        if (a.out_bf16 != nullptr) {  // the fp32 value rounded once, as the GEMM would round it
          const __nv_bfloat162 b = __floats2bfloat162_rn(v.x, v.y);
          *reinterpret_cast<__nv_bfloat162*>(a.out_bf16 + at + dt * 8 + 2 * cq) = b;
        } else {
          *reinterpret_cast<float2*>(a.out + at + dt * 8 + 2 * cq) = v;
        }
      }
    }
}

// The CTA shape: W warps of MT m-tiles (16 rows each) in P streams, ST K/V tiles in the ring,
// the unmasked fast path (MT = 1) and tq tokens per CTA. MT = 1 is attention_tc_kernel (W = 1,
// 4 or 8; W = 4 also with ST = 3 and/or the fast path), MT = 2 attention_tc_mt_kernel (W = 4:
// 128 rows; P = 1 with ST = 2 or 3, or P = 2 with ST = 2 and head_dim ≥ 64). Chosen (H200,
// docs/cuda.md): decode-like steps (few query tokens per sequence) one token per CTA of 4
// warps; steps of ≥ kStreamsMinTokens query tokens with head_dim ≥ 64 the two streams of 32-row
// warps (1.11–1.18× at L = 8192, 16384; 1.06× at 6144; 0.97× at 4096, 0.95× at 3072, 0.88× at
// 2048, against 4 × 16 with the fast path); others 4 warps of packed tokens with the fast path
// (1.01–1.03×). Any shape gives the same bits (rows are independent; see the file comment): the
// tests force each.
constexpr int kStreamsMinTokens = 6144;
constexpr int kMtMaxCtasInBlock = 256;  // fewer CTAs of 128 rows: a CTA per round instead
constexpr int64_t kWgHd64MinCtas = 512;  // head_dim 64: the warpgroup schedule from this grid on

struct TcShape {
  int warps, m_tiles, stages, streams, tq;
  bool fast;
  bool wgmma = false;   // attention_wg.cu's schedule of the 4 × 16 CTA
  bool q_smem = false;  // … with Q from shared memory
  bool shared = false;  // attention_tc_shared.cu's CTA: 4 warps share a split, ≤ 16 rows
};
TcShape tc_shape(const AttentionArgs& a, int n_seqs, const TcSchedule& s) {
  const int n_rep = a.n_heads / a.n_kv_heads;
  const bool decode_like = a.n_tokens <= 2 * n_seqs;
  // The warpgroup schedule (attention_wg.cu): chosen for every non-decode-like step it can
  // run unless a CTA shape is forced (H200, cuda_attention_bench --prefill-shapes: at head_dim
  // 128 1.07–1.22× the best mma.sync shape at L = 512…16384 before its copies were made
  // straight-line, 1.34–1.42× itself since, docs/cuda.md); Q from registers at head_dim 128,
  // from shared memory at 64 (attention_wg_supported says why).
  const bool chosen = s.wgmma < 0 && s.warps <= 0 && s.m_tiles <= 0 && !decode_like;
  // At head_dim 64 only Q in shared memory runs on wgmma, and it pays from about two waves of
  // CTAs on (H200, cuda_attention_bench --heads 32,8,64 / 9,3,64: 1.18–1.56× at 1,024–5,876
  // CTAs, 0.97–1.0× at 75–293; docs/cuda.md).
  const int wg_tq = n_rep <= 4 * kWarpRows ? (4 * kWarpRows) / n_rep : 1;
  const int64_t ctas = static_cast<int64_t>((a.n_tokens + wg_tq - 1) / wg_tq) * a.n_kv_heads;
  const bool hd64 = a.head_dim == 64;
  const bool wg = s.wgmma >= 1 || (chosen && (!hd64 || ctas >= kWgHd64MinCtas));
  const bool q_smem = s.wgmma == 2 || (s.wgmma < 0 && hd64);
  if (wg && attention_wg_supported(a.head_dim, n_rep, q_smem)) {
    const bool fast = s.fast == 1 || (s.fast < 0 && !decode_like);
    const int stages = s.stages == 2 ? 2 : 3;
    return {4, 1, stages, 1, decode_like ? 1 : (4 * kWarpRows) / n_rep, fast, true, q_smem};
  }
  // The shared-split CTA: chosen for decode-like steps when no other CTA shape is forced
  // (docs/cuda.md, "The shared-split CTA"); forced on any step whose tokens' heads fit its 16
  // rows (kWarpRows / n_rep tokens a CTA).
  // Chosen while its CTAs (148 KB of shared memory at head_dim 128: one an SM) fit one wave
  // of the card: at 1 × 8192 (256 CTAs) it took 22 µs against the packed CTAs' 20 (H200,
  // cuda_attention_bench --decode-variants).
  const bool forced_shape = s.warps > 0 || s.m_tiles > 0 || s.wgmma >= 1;
  const int64_t split_ctas = int64_t{a.n_tokens} * a.n_kv_heads * max_splits_of(a);
  const bool one_wave = split_ctas <= kSms;
  if (n_rep <= kWarpRows &&
      (s.shared == 1 || (s.shared < 0 && decode_like && !forced_shape && one_wave))) {
    TcShape shape{4, 1, 2, 1, decode_like ? 1 : kWarpRows / n_rep, false};
    shape.shared = true;
    return shape;
  }
  int m_tiles = s.m_tiles, n_streams = s.streams;
  if (m_tiles <= 0) {  // a forced warp count means the 16-row warps
    const bool streams = s.warps <= 0 && !decode_like && a.n_tokens >= kStreamsMinTokens &&
                         a.head_dim >= 64;
    m_tiles = streams ? 2 : 1;
    if (streams && n_streams <= 0) n_streams = 2;
  }
  if (m_tiles >= 2) {
    const int streams = n_streams == 2 && a.head_dim >= 64 ? 2 : 1;
    const int stages = streams == 1 && s.stages == 3 ? 3 : 2;
    return {4, 2, stages, streams, (4 * 2 * kWarpRows) / n_rep, false};
  }
  int warps = s.warps == 1 || s.warps == 8 ? s.warps : 4;
  if (warps * kWarpRows < n_rep) warps = 4;
  if (warps == 8 && a.head_dim < 32) warps = 4;  // 256 threads copy more than a 64-row tile a pass
  const int stages = warps == 4 && s.stages == 3 ? 3 : 2;
  const bool fast = warps == 4 && (s.fast == 1 || (s.fast < 0 && !decode_like));
  // Decode-like: one token per CTA (its heads in warp 0; the other warps help copy K/V).
  const int tq = warps == 1 || decode_like ? 1 : (warps * kWarpRows) / n_rep;
  return {warps, 1, stages, 1, tq, fast};
}

bool use_split_blocks(const AttentionArgs& a, const TcShape& shape, int force_split) {
  if (force_split >= 0) return force_split == 1;
  const int64_t ctas = static_cast<int64_t>((a.n_tokens + shape.tq - 1) / shape.tq) * a.n_kv_heads;
  const size_t scratch = sizeof(float) * partials_floats(a);
  const int64_t few = shape.m_tiles == 2 ? kMtMaxCtasInBlock : kMaxCtasInBlock;
  return ctas < few && max_splits_of(a) > 1 && scratch <= kMaxSplitScratch;
}

template <int HD, int W, int ST = 2, bool FAST = false>
cudaError_t launch_tc(const AttentionArgs& a, int tq, float* scratch, bool split,
                      unsigned int* merge_counters, cudaStream_t stream) {
  const int max_splits = max_splits_of(a);
  const size_t smem = sizeof(__nv_bfloat16) * 2 * ST * kKvTile * (HD + 8);
  // Once per kernel and process (a host call per launch costs decode steps microseconds).
  static const cudaError_t attr = cudaFuncSetAttribute(
      attention_tc_kernel<HD, W, ST, FAST>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(smem));
  cudaError_t err = attr;
  if (err != cudaSuccess) return err;
  const dim3 grid((a.n_tokens + tq - 1) / tq, a.n_kv_heads, split ? max_splits : 1);
  // The split CTAs merge in the last of each group when the groups have counters.
  unsigned int* counters =
      split && static_cast<int64_t>(grid.x) * grid.y <= kMergeCounters ? merge_counters : nullptr;
  attention_tc_kernel<HD, W, ST, FAST><<<grid, W * 32, smem, stream>>>(
      a, tq, a.scale * kLog2e, scratch, max_splits, split, counters);
  err = cudaGetLastError();
  if (err != cudaSuccess || !split || counters != nullptr) return err;
  return launch_merge_partials<HD>(a, scratch, max_splits, stream);
}

template <int HD, int ST, int P>
cudaError_t launch_mt(const AttentionArgs& a, int tq, float* scratch, bool split,
                      cudaStream_t stream) {
  constexpr int W = 4, MT = 2;
  constexpr bool SWZ = P == 2;  // the two streams' ring fits only unpadded
  const int max_splits = max_splits_of(a);
  constexpr size_t smem = mt_smem_bytes<HD, W, MT, ST, P, SWZ>();
  static const cudaError_t attr = cudaFuncSetAttribute(
      attention_tc_mt_kernel<HD, W, MT, ST, P, SWZ>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(smem));
  cudaError_t err = attr;
  if (err != cudaSuccess) return err;
  const dim3 grid((a.n_tokens + tq - 1) / tq, a.n_kv_heads, split ? (max_splits + P - 1) / P : 1);
  attention_tc_mt_kernel<HD, W, MT, ST, P, SWZ>
      <<<grid, W * P * 32, smem, stream>>>(a, tq, a.scale * kLog2e, scratch, max_splits, split);
  err = cudaGetLastError();
  if (err != cudaSuccess || !split) return err;
  return launch_merge_partials<HD>(a, scratch, max_splits, stream);
}

template <int HD>
cudaError_t launch_hd(const AttentionArgs& a, const TcShape& shape, float* scratch, bool split,
                      unsigned int* merge_counters, cudaStream_t stream) {
  if (shape.m_tiles == 2) {
    if constexpr (HD >= 64)
      if (shape.streams == 2) return launch_mt<HD, 2, 2>(a, shape.tq, scratch, split, stream);
    if (shape.stages == 3) return launch_mt<HD, 3, 1>(a, shape.tq, scratch, split, stream);
    return launch_mt<HD, 2, 1>(a, shape.tq, scratch, split, stream);
  }
  unsigned int* mc = merge_counters;
  if (shape.warps == 1) return launch_tc<HD, 1>(a, shape.tq, scratch, split, mc, stream);
  if constexpr (HD >= 32)
    if (shape.warps == 8) return launch_tc<HD, 8>(a, shape.tq, scratch, split, mc, stream);
  if (shape.stages == 3) {
    if (shape.fast) return launch_tc<HD, 4, 3, true>(a, shape.tq, scratch, split, mc, stream);
    return launch_tc<HD, 4, 3, false>(a, shape.tq, scratch, split, mc, stream);
  }
  if (shape.fast) return launch_tc<HD, 4, 2, true>(a, shape.tq, scratch, split, mc, stream);
  return launch_tc<HD, 4>(a, shape.tq, scratch, split, mc, stream);
}

}  // namespace

bool attention_tc_supported(int32_t head_dim, int32_t n_rep) {
  return (head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128) && n_rep >= 1 &&
         n_rep <= 4 * kWarpRows;
}

// The decode schedule runs decode-like steps (at most two query tokens a sequence) with enough
// work to fill the card, or every step when forced, wherever it applies. Measured on the H200
// (cuda_attention_bench, docs/cuda.md): faster from ~512 (token, KV head, split) items on
// (batch 8 at context 2048: 1.3×); below that the packed CTAs, whose four warps all copy for
// one computing warp, are faster (batch 1–8 at context ≤ 8192: 1.15–1.25×).
constexpr int64_t kDecodeScheduleMinItems = 512;
static bool use_decode_schedule(const AttentionArgs& a, int n_seqs, const TcSchedule& s) {
  if (s.decode == 0 || !attention_tc_decode_applies(a)) return false;
  if (s.decode == 1) return true;
  const int64_t items = static_cast<int64_t>(a.n_tokens) * a.n_kv_heads * max_splits_of(a);
  return a.n_tokens <= 2 * n_seqs && items >= kDecodeScheduleMinItems;
}

size_t attention_tc_scratch_floats(const AttentionArgs& a, int n_seqs, const TcSchedule& s) {
  if (use_decode_schedule(a, n_seqs, s)) return kMergeCounterFloats + partials_floats(a);
  if (!use_split_blocks(a, tc_shape(a, n_seqs, s), s.split)) return 0;
  return kMergeCounterFloats + partials_floats(a);
}

cudaError_t launch_attention_tc(const AttentionArgs& a, int n_seqs, float* scratch,
                                const TcSchedule& s, cudaStream_t stream) {
  if (a.n_tokens == 0) return cudaSuccess;
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0 ||
      !attention_tc_supported(a.head_dim, a.n_heads / a.n_kv_heads) || a.k_bf16 == nullptr ||
      a.v_bf16 == nullptr)
    return cudaErrorInvalidValue;
  // The scratch (attention_tc_scratch_floats): the merge counters, then the partials.
  unsigned int* counters = reinterpret_cast<unsigned int*>(scratch);
  float* partials = scratch != nullptr ? scratch + kMergeCounterFloats : nullptr;
  if (use_decode_schedule(a, n_seqs, s))
    return launch_attention_tc_decode(a, partials, s, stream);
  const TcShape shape = tc_shape(a, n_seqs, s);
  const bool split = use_split_blocks(a, shape, s.split);
  if (split && scratch == nullptr) return cudaErrorInvalidValue;
  if (shape.wgmma)
    return launch_attention_wg(a, shape.tq, shape.stages, shape.fast, shape.q_smem, partials,
                               split, stream);
  // The split merge: chosen, the merge kernel (H200, cuda_e2e_bench --attn-merge at batch 1
  // and 8: the last CTA's merge was no faster, docs/cuda.md); 1 in the group's last CTA.
  // 2: the shared-split CTAs of a row as one cluster, merging through their shared memory
  // (attention_tc_shared.cu; rows of ≤ 8 splits, else the merge kernel; elsewhere 0).
  unsigned int* merge = s.merge == 1 ? counters : nullptr;
  if (shape.shared)
    return launch_attention_tc_shared(a, shape.tq, partials, split, merge, s.merge == 2, stream);
  switch (a.head_dim) {
    case 16:
      return launch_hd<16>(a, shape, partials, split, merge, stream);
    case 32:
      return launch_hd<32>(a, shape, partials, split, merge, stream);
    case 64:
      return launch_hd<64>(a, shape, partials, split, merge, stream);
    default:
      return launch_hd<128>(a, shape, partials, split, merge, stream);
  }
}

}  // namespace detllm::kernels::cuda
