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
#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {

namespace {

using namespace tc;

constexpr int kMaxCtasInBlock = 1024;  // fewer CTAs unsplit: a CTA per split instead
constexpr size_t kMaxSplitScratch = size_t(512) << 20;  // bytes of split partials at most

// grid (ceil(n_tokens / tq), n_kv_heads, split_blocks ? max_splits : 1), block W warps.
// CTA x holds tokens [x·tq, x·tq + tq) (heaviest last tokens first: x is reversed) × the n_rep
// query heads of kv head blockIdx.y: row r = (token r / n_rep, head r % n_rep), warp r / 16.
// Rows of one mma tile share K/V, so the CTA walks the runs of tokens of one sequence
// (segments) one after another; rows outside the segment are fully masked meanwhile.
template <int HD, int W>
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
  const float* qr[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * kWarpRows + gq + 8 * i;
    const int t = t_begin + r / n_rep;
    row_ok[i] = r < tq * n_rep && t < t_end;
    row_t[i] = t;
    row_h[i] = g * n_rep + r % n_rep;
    row_pos[i] = row_ok[i] ? a.positions[t] : -1;
    qr[i] = row_ok[i] ? a.q + (static_cast<int64_t>(t) * a.n_heads + row_h[i]) * HD : nullptr;
  }
  uint32_t qf[HD / 16][4];
  load_q_fragments<HD>(qf, qr, cq);

  float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f};  // merged splits
  float O[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) O[dt][0] = O[dt][1] = O[dt][2] = O[dt][3] = 0.0f;

  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * HD;  // elements per slot

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
      SplitState<HD> st;  // this split
      st.reset();

      load_tile(0, range_begin);
      cp_async_commit();
      for (int f = 0; f < n_tiles; ++f) {
        const int start = range_begin + f * kKvTile;
        const int z = start / kTcSplit, first = z * kTcSplit;  // the tile's split
        if (start == first) st.reset();  // a split starts: its state from zero
        if (f + 1 < n_tiles) load_tile((f + 1) & 1, start + kKvTile);
        cp_async_commit();
        cp_async_wait<1>();       // this thread's copies of tile f have landed
        __syncthreads();          // everyone's have
        if (warp_lim >= start) {  // else the tile is masked for every row of this warp
          float s[kKvTile / 8][4];
          tile_scores<HD>(kbuf + (f & 1) * kKvTile * LD, qf, start, lim, scale_log2,
                          a.tc_layout_dependent, st, s);
          tile_values<HD>(vbuf + (f & 1) * kKvTile * LD, s, st);
        }
        __syncthreads();  // buffer f & 1 is free for tile f + 2
        if ((start + kKvTile) % kTcSplit != 0 && f + 1 < n_tiles) continue;
        // The end of split z: rows whose position reaches it merge (or store) its state.
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (lim[i] < first) continue;
          if (split_blocks) {
            store_partial<HD>(partials, static_cast<int64_t>(row_t[i]) * a.n_heads + row_h[i],
                              max_splits, z, st, i);
          } else {
            const MergeWeights w = merge_state(M[i], L[i], st.m[i], st.l[i]);
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
              O[dt][2 * i] = merge_value(O[dt][2 * i], st.o[dt][2 * i], w);
              O[dt][2 * i + 1] = merge_value(O[dt][2 * i + 1], st.o[dt][2 * i + 1], w);
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
  return launch_merge_partials<HD>(a, scratch, max_splits, stream);
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
  if (use_decode_schedule(a, n_seqs, s)) return attention_tc_decode_scratch_floats(a);
  if (!use_split_blocks(a, tc_shape(a, n_seqs, s.warps), s.split)) return 0;
  return static_cast<size_t>(a.n_tokens) * a.n_heads * max_splits_of(a) * (a.head_dim + 2);
}

cudaError_t launch_attention_tc(const AttentionArgs& a, int n_seqs, float* scratch,
                                const TcSchedule& s, cudaStream_t stream) {
  if (a.n_tokens == 0) return cudaSuccess;
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0 ||
      !attention_tc_supported(a.head_dim, a.n_heads / a.n_kv_heads) || a.k_bf16 == nullptr ||
      a.v_bf16 == nullptr)
    return cudaErrorInvalidValue;
  if (use_decode_schedule(a, n_seqs, s))
    return launch_attention_tc_decode(a, scratch, s.split, s.decode_ring, stream);
  const TcShape shape = tc_shape(a, n_seqs, s.warps);
  const bool split = use_split_blocks(a, shape, s.split);
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
