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
#include "kernels/cuda/attention_tc_kernel.cuh"
#include "kernels/cuda/attention_tc_shared.h"
#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {

namespace {

using namespace tc;

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
    const SegmentSplits sg = segment_splits(a, seg_begin, t_end, split_blocks, P);
    const int seg_end = sg.end, max_pos = sg.max_pos, n_splits = sg.n_splits;
    const int z_begin = sg.z_begin, z_end = sg.z_end;  // a CTA per round of P splits
    const int* table = sg.table;
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
      tile_min[j] = warp_min(min(lim[j][0], lim[j][1]));
    }
    warp_lim = warp_max(warp_lim);
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
        tile_scores_mt<HD, MT, SWZ>(ring + at, qw, start, lim, mask, scale_log2, st, s);
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

// The launches of the CTA kernels the planner chooses (kernels/attention_plan.h): the packed
// CTA of 4 warps × 16 rows, a ring of 2 K/V tiles, with the unmasked fast path (not decode-like
// steps) or without it; and two streams of 4 warps × 32 rows (head_dim ≥ 64), swizzled tiles.
// The kernels' other shapes (1 or 8 warps, a ring of 3 tiles, one stream of 32-row warps) were
// never chosen on any step (docs/cuda.md) and are no longer instantiated.
// KV8: the same CTA over an FP8 cache (its loads dequantize into the bf16 tiles).
template <int HD, bool FAST, bool KV8 = false>
cudaError_t launch_tc(const AttentionArgs& a, int tq, float* scratch, bool split,
                      cudaStream_t stream) {
  constexpr int W = 4, ST = 2;
  const int max_splits = max_splits_of(a);
  const size_t smem = sizeof(__nv_bfloat16) * 2 * ST * kKvTile * (HD + 8);
  // Once per kernel and process (a host call per launch costs decode steps microseconds).
  static const cudaError_t attr = cudaFuncSetAttribute(
      attention_tc_kernel<HD, W, ST, FAST, false, KV8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(smem));
  cudaError_t err = attr;
  if (err != cudaSuccess) return err;
  const dim3 grid((a.n_tokens + tq - 1) / tq, a.n_kv_heads, split ? max_splits : 1);
  attention_tc_kernel<HD, W, ST, FAST, false, KV8><<<grid, W * 32, smem, stream>>>(
      a, tq, a.scale * kLog2e, scratch, max_splits, split);
  err = cudaGetLastError();
  if (err != cudaSuccess || !split) return err;
  return launch_merge_partials<HD>(a, scratch, max_splits, stream);
}

template <int HD>
cudaError_t launch_streams(const AttentionArgs& a, int tq, float* scratch, bool split,
                           cudaStream_t stream) {
  constexpr int W = 4, MT = 2, ST = 2, P = 2;
  constexpr bool SWZ = true;  // the two streams' ring fits only unpadded
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
cudaError_t launch_hd(const AttentionArgs& a, const AttentionPlan& p, float* scratch,
                      cudaStream_t stream) {
  if constexpr (HD >= 64)
    if (p.kernel == AttentionKernel::kPackedStreams)
      return launch_streams<HD>(a, p.tq, scratch, p.split_blocks, stream);
  if (p.kernel != AttentionKernel::kPacked) return cudaErrorInvalidValue;
  if (a.k_fp8 != nullptr) {
    if (p.fast) return launch_tc<HD, true, true>(a, p.tq, scratch, p.split_blocks, stream);
    return launch_tc<HD, false, true>(a, p.tq, scratch, p.split_blocks, stream);
  }
  if (p.fast) return launch_tc<HD, true>(a, p.tq, scratch, p.split_blocks, stream);
  return launch_tc<HD, false>(a, p.tq, scratch, p.split_blocks, stream);
}

}  // namespace

AttentionStepShape attention_step_shape(const AttentionArgs& a, int n_seqs) {
  AttentionStepShape s;
  s.n_tokens = a.n_tokens;
  s.n_seqs = n_seqs;
  s.n_heads = a.n_heads;
  s.n_kv_heads = a.n_kv_heads;
  s.head_dim = a.head_dim;
  s.block_size = a.block_size;
  s.max_blocks = a.max_blocks;
  s.kv_fp8 = a.k_fp8 != nullptr;
  return s;
}

cudaError_t launch_attention_tc(const AttentionArgs& a, const AttentionPlan& plan, float* scratch,
                                cudaStream_t stream) {
  if (a.n_tokens == 0) return cudaSuccess;
  const bool fp8 = a.k_fp8 != nullptr;
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0 ||
      !attention_tc_supported(a.head_dim, a.n_heads / a.n_kv_heads) ||
      (fp8 ? a.v_fp8 == nullptr || a.k_scale == nullptr || a.v_scale == nullptr
           : a.k_bf16 == nullptr || a.v_bf16 == nullptr))
    return cudaErrorInvalidValue;
  // An FP8 cache: the packed CTA (its loads dequantize) or the decode warps (their rings
  // dequantize in place); the planner offers no other (AttentionStepShape::kv_fp8), and any
  // other plan is refused.
  if (fp8 && plan.kernel != AttentionKernel::kPacked &&
      plan.kernel != AttentionKernel::kDecodeWarps)
    return cudaErrorInvalidValue;
  if (plan.scratch_floats > 0 && scratch == nullptr) return cudaErrorInvalidValue;
  switch (plan.kernel) {
    case AttentionKernel::kDecodeWarps:
      return launch_attention_tc_decode(a, scratch, plan, stream);
    case AttentionKernel::kWarpgroup:
      return launch_attention_wg(a, plan.tq, scratch, plan.split_blocks, stream);
    case AttentionKernel::kSharedSplit:
      return launch_attention_tc_shared(a, plan.tq, scratch, plan.split_blocks, stream);
    case AttentionKernel::kPacked:
    case AttentionKernel::kPackedStreams:
      break;
  }
  return with_head_dim(a.head_dim, [&](auto hd) {
    return launch_hd<decltype(hd)::value>(a, plan, scratch, stream);
  });
}

}  // namespace detllm::kernels::cuda
