// The decode schedule of the tensor-core attention: one warp per (token, KV head, run of KV
// splits), each warp with its own cp.async ring of K/V tiles in shared memory, nothing shared
// between the warps of a CTA (no __syncthreads). Every split's state goes to the partials and
// the merge kernel folds them in ascending order.
//
// The copies are 16-byte cp.async per lane and row piece, by default with an L2 prefetch of
// 128 bytes (PREFETCH; the same data, measured 1–2% faster at batch ≥ 8). Tried on the H200
// and not kept (docs/cuda.md, "Decode: half-tile rings, the copies' L2 prefetch, and what did
// not help"): one bulk copy (TMA) per K/V row on an mbarrier per buffer (0.7–0.8× the speed),
// a prefetch of 256 bytes (no gain), and head-major warp order, a token's KV heads on adjacent
// warps so that the warps running at once read whole cache slots (the same speed).
//
// Why: in a decode step a token's rows are only its n_rep query heads (4 for Llama-3-8B), so
// the packed schedule (attention_tc.cu) has one computing warp per CTA and the other warps only
// copy; a CTA holds two tiles, and too few bytes are in flight per SM. Here every warp computes
// and keeps the tiles of its ring but one (16 KB each) in flight.
//
// The bits are attention_tc.cu's: the per-tile arithmetic (tile_scores, tile_values), the
// split grid and the merge are the same functions (attention_tc_common.cuh); a row's place in
// the warp tile, which warp or CTA runs a split and how many splits a warp runs change nothing.
// The tests run every schedule against every other (CudaAttentionTc.BitIdenticalAcross…).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/attention_tc_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {
namespace {

using namespace tc;

// A CTA holds kDecRingTiles K/V tiles (209 KB at head_dim 128) as a ring of NBUF chunks for
// each of its warps, NBUF − 1 chunks in flight per warp. A chunk is a whole K or V tile (12 /
// NBUF warps), or with HALF half of one, 32 positions (24 / NBUF warps: twice the warps
// computing beside each other for the same shared memory; the scores and the P·V k-steps of
// the tile are made half by half, in the same order: tile_qk_part, tile_values_part). NBUF,
// HALF and the prefetch are free (same bits).
constexpr int kDecRingTiles = 12;
constexpr int kDecDefaultRing = 3;  // chunks a warp's ring holds: 3 (whole tiles: 4 warps; halves: 8)
constexpr int kDecDefaultPrefetch = 128;  // L2 prefetch size of the copies (bytes; 0 none)
constexpr bool kDecDefaultHalf = true;  // half-tile chunks, a ring of 3 (8 warps): measured 1–10%
                                        // faster than whole tiles where this schedule runs
constexpr size_t kMaxDecodeScratch = size_t(512) << 20;  // bytes of split partials at most

template <bool HALF>
constexpr int kChunkRows = HALF ? kKvTile / 2 : kKvTile;
template <int NBUF, bool HALF>
constexpr int kDecWarps = kDecRingTiles * (kKvTile / kChunkRows<HALF>) / NBUF;

// grid (ceil(n_tokens · n_zc · n_kv_heads / W)), block W = kDecWarps<NBUF, HALF> warps.
// Warp w: token w % n_tokens, then run zc of splits [zc·S, zc·S + S), then KV head g.
template <int HD, int NBUF, int PREFETCH, bool HALF>
__global__ void __launch_bounds__(kDecWarps<NBUF, HALF> * 32)
    attention_tc_decode_kernel(const AttentionArgs a, float scale_log2, float* partials,
                               int max_splits, int splits_per_warp, int n_zc) {
  constexpr int LD = kLd<HD>;
  constexpr int ROWS = kChunkRows<HALF>;  // K/V rows of one chunk
  constexpr int CPT = 2 * kKvTile / ROWS;  // chunks per tile: K (lo, hi), V (lo, hi)
  constexpr int CH = HD / 8;             // 16-byte pieces of one K/V row
  constexpr int RPP = 32 / CH;           // rows the warp copies per pass
  constexpr int PASSES = ROWS / RPP;     // passes per chunk
  static_assert(32 % CH == 0 && ROWS % RPP == 0, "whole rows per pass");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gq = lane >> 2, cq = lane & 3;
  __nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(smem_raw) + warp * NBUF * ROWS * LD;

  constexpr int W = kDecWarps<NBUF, HALF>;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * W + warp;
  const int t = static_cast<int>(w % a.n_tokens);
  const int64_t rest = w / a.n_tokens;
  const int zc = static_cast<int>(rest % n_zc);
  const int g = static_cast<int>(rest / n_zc);
  if (g >= a.n_kv_heads) return;  // warp-uniform: the grid's last CTA
  const int pos = a.positions[t];
  const int n_splits = pos / kTcSplit + 1;
  const int z_begin = zc * splits_per_warp;
  if (z_begin >= n_splits) return;  // this token has no such run of splits
  const int z_end = min(z_begin + splits_per_warp, n_splits);
  const int range_begin = z_begin * kTcSplit;
  const int range_end = min(z_end * kTcSplit, pos + 1);
  const int n_tiles = (range_end - range_begin + kKvTile - 1) / kKvTile;
  const int n_chunks = CPT * n_tiles;  // whole: 2f K, 2f + 1 V; HALF: 4f, 4f + 1 K, 4f + 2, 4f + 3 V

  const int n_rep = a.n_heads / a.n_kv_heads;
  const int* table = a.block_tables + static_cast<int64_t>(a.seq_of_token[t]) * a.max_blocks;
  const uint32_t row_elems = static_cast<uint32_t>(a.n_kv_heads) * HD;  // elements per slot
  const uint16_t* k_src = a.k_bf16 + g * HD;
  const uint16_t* v_src = a.v_bf16 + g * HD;

  // Lane j holds the slots of positions start + j and start + 32 + j of the tile being
  // issued (cur) and of the next one (nxt, loaded a tile ahead so the copy never waits on
  // the block table); -1 past range_end (zeros are stored there, never the cache).
  const int block_shift = block_shift_of(a.block_size);
  auto slot_of = [&](int p) { return kv_slot(table, p, range_end, a.block_size, block_shift); };
  int cur0 = slot_of(range_begin + lane), cur1 = slot_of(range_begin + 32 + lane);
  int nxt0 = slot_of(range_begin + kKvTile + lane), nxt1 = slot_of(range_begin + kKvTile + 32 + lane);
  auto issue = [&](int c) {
    __nv_bfloat16* buf = ring + (c % NBUF) * ROWS * LD;
    const int part = c % CPT;
    const uint16_t* src = part >= CPT / 2 ? v_src : k_src;
    const int d = (lane % CH) * 8;
#pragma unroll
    for (int k = 0; k < PASSES; ++k) {
      const int j = lane / CH + RPP * k;  // the chunk row this lane copies
      // Tile row j (whole) or j + 32 · (part % 2) (HALF): its slot is in cur0 or cur1.
      const bool upper = HALF ? (part & 1) != 0 : RPP * k >= 32;
      const int slot = __shfl_sync(kFull, upper ? cur1 : cur0, j & 31);
      copy_chunk<PREFETCH>(buf + j * LD + d, src + d, slot, row_elems);
    }
    if (part == CPT - 1) {  // the tile's V is issued: move on to the next tile's slots
      const int next = range_begin + (c / CPT + 2) * kKvTile;
      cur0 = nxt0;
      cur1 = nxt1;
      nxt0 = slot_of(next + lane);
      nxt1 = slot_of(next + 32 + lane);
    }
  };
#pragma unroll
  for (int c = 0; c < NBUF - 1; ++c) {
    if (c < n_chunks) issue(c);
    cp_async_commit();
  }

  // The thread's rows gq and gq + 8: query heads g·n_rep + r of token t.
  int lim[2];
  const float* qr[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = gq + 8 * i;
    lim[i] = r < n_rep ? pos : -1;
    qr[i] = r < n_rep ? a.q + (static_cast<int64_t>(t) * a.n_heads + g * n_rep + r) * HD : nullptr;
  }
  uint32_t qf[HD / 16][4];
  load_q_fragments<HD>(qf, qr, cq);

  // Chunk c is ready: the copies issued NBUF − 1 commits ago have landed, for every lane.
  auto ready = [&](int c) {
    if (c + NBUF - 1 < n_chunks) issue(c + NBUF - 1);  // into the buffer chunk c − 1 freed
    cp_async_commit();
    cp_async_wait<NBUF - 1>();
    __syncwarp();
    return ring + (c % NBUF) * ROWS * LD;
  };
  SplitState<HD> st;
  float s[kKvTile / 8][4];
  constexpr int NT = kKvTile / 8, KS = kKvTile / 16;  // n8 score tiles, P·V k-steps
  for (int f = 0; f < n_tiles; ++f) {
    const int start = range_begin + f * kKvTile;
    if (start % kTcSplit == 0) st.reset();  // a split starts: its state from zero
    if constexpr (HALF) {
      tile_qk_part<HD, 0, NT / 2>(ready(CPT * f), qf, s);
      __syncwarp();  // each buffer is free for the chunk NBUF − 1 after it
      tile_qk_part<HD, NT / 2, NT / 2>(ready(CPT * f + 1), qf, s);
      __syncwarp();
      tile_softmax<HD, true>(start, lim, scale_log2, a.tc_layout_dependent, st, s);
      tile_values_part<HD, 0, KS / 2>(ready(CPT * f + 2), s, st);
      __syncwarp();
      tile_values_part<HD, KS / 2, KS / 2>(ready(CPT * f + 3), s, st);
      __syncwarp();
    } else {
      tile_scores<HD>(ready(CPT * f), qf, start, lim, scale_log2, a.tc_layout_dependent, st, s);
      __syncwarp();  // the K buffer is free for the chunk after next
      tile_values<HD>(ready(CPT * f + 1), s, st);
      __syncwarp();
    }
    if ((start + kKvTile) % kTcSplit != 0 && f + 1 < n_tiles) continue;
    const int z = start / kTcSplit;  // the end of split z: store its state
#pragma unroll
    for (int i = 0; i < 2; ++i)
      if (lim[i] >= 0)
        store_partial<HD>(partials,
                          static_cast<int64_t>(t) * a.n_heads + g * n_rep + gq + 8 * i,
                          max_splits, z, st, i);
  }
}

template <int HD, int NBUF, int PREFETCH, bool HALF>
cudaError_t launch_decode(const AttentionArgs& a, float* scratch, int force_split,
                          cudaStream_t stream) {
  constexpr int W = kDecWarps<NBUF, HALF>;
  const int max_splits = max_splits_of(a);
  int per_warp = 1;  // splits a warp runs: any count gives the same bits
  if (force_split == 0) {
    per_warp = max_splits;
  } else if (force_split != 1) {
    // Aim at two waves of the card's warps (one CTA an SM).
    const int64_t target = int64_t{132} * W * 2;
    const int64_t items = static_cast<int64_t>(a.n_tokens) * a.n_kv_heads * max_splits;
    per_warp = static_cast<int>(std::clamp<int64_t>((items + target - 1) / target, 1, max_splits));
  }
  const int n_zc = (max_splits + per_warp - 1) / per_warp;
  const int64_t warps = static_cast<int64_t>(a.n_tokens) * n_zc * a.n_kv_heads;
  const size_t smem = sizeof(__nv_bfloat16) * W * NBUF * kChunkRows<HALF> * kLd<HD>;
  static const cudaError_t attr = cudaFuncSetAttribute(
      attention_tc_decode_kernel<HD, NBUF, PREFETCH, HALF>,
      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (attr != cudaSuccess) return attr;
  const auto blocks = static_cast<unsigned>((warps + W - 1) / W);
  attention_tc_decode_kernel<HD, NBUF, PREFETCH, HALF><<<blocks, W * 32, smem, stream>>>(
      a, a.scale * kLog2e, scratch, max_splits, per_warp, n_zc);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return launch_merge_partials<HD>(a, scratch, max_splits, stream);
}

// Whether the step runs half-tile chunks (TcSchedule::decode_chunk, 0: the default).
bool decode_half(const TcSchedule& s) {
  return s.decode_chunk == 0 ? kDecDefaultHalf : s.decode_chunk == 2;
}

// Rings of 2 (whole tiles only), 3, 4 or 6 chunks (0: kDecDefaultRing).
template <int HD, int PREFETCH, bool HALF>
cudaError_t launch_ring(const AttentionArgs& a, float* scratch, int force_split, int ring,
                        cudaStream_t stream) {
  switch (ring) {
    case 2:
      if constexpr (!HALF) return launch_decode<HD, 2, PREFETCH, HALF>(a, scratch, force_split, stream);
      return cudaErrorInvalidValue;
    case 4:
      return launch_decode<HD, 4, PREFETCH, HALF>(a, scratch, force_split, stream);
    case 6:
      return launch_decode<HD, 6, PREFETCH, HALF>(a, scratch, force_split, stream);
    default:
      return launch_decode<HD, kDecDefaultRing, PREFETCH, HALF>(a, scratch, force_split, stream);
  }
}

// Half tiles always with the prefetch; whole tiles with or without it.
template <int HD>
cudaError_t launch_copy(const AttentionArgs& a, float* scratch, const TcSchedule& s,
                        cudaStream_t stream) {
  if (decode_half(s))
    return launch_ring<HD, kDecDefaultPrefetch, true>(a, scratch, s.split, s.decode_ring, stream);
  const bool prefetch = s.decode_copy == 0 ? kDecDefaultPrefetch > 0 : s.decode_copy == 2;
  if (prefetch)
    return launch_ring<HD, kDecDefaultPrefetch, false>(a, scratch, s.split, s.decode_ring, stream);
  return launch_ring<HD, 0, false>(a, scratch, s.split, s.decode_ring, stream);
}

}  // namespace

bool attention_tc_decode_schedule_supported(const TcSchedule& s) {
  if (s.decode_chunk < 0 || s.decode_chunk > 2 || s.decode_copy < 0 || s.decode_copy > 2)
    return false;
  const int r = s.decode_ring;
  // Half tiles: rings of 3, 4 or 6 halves, always with the prefetch; whole tiles: 2 too.
  if (decode_half(s)) return (r == 0 || r == 3 || r == 4 || r == 6) && s.decode_copy != 1;
  return r == 0 || r == 2 || r == 3 || r == 4 || r == 6;
}

bool attention_tc_decode_applies(const AttentionArgs& a) {
  const int n_rep = a.n_kv_heads > 0 ? a.n_heads / a.n_kv_heads : 0;
  return n_rep >= 1 && n_rep <= kWarpRows && a.n_tokens > 0 &&
         sizeof(float) * partials_floats(a) <= kMaxDecodeScratch;
}

cudaError_t launch_attention_tc_decode(const AttentionArgs& a, float* scratch,
                                       const TcSchedule& s, cudaStream_t stream) {
  if (!attention_tc_decode_applies(a) || scratch == nullptr ||
      !attention_tc_decode_schedule_supported(s))
    return cudaErrorInvalidValue;
  switch (a.head_dim) {
    case 16:
      return launch_copy<16>(a, scratch, s, stream);
    case 32:
      return launch_copy<32>(a, scratch, s, stream);
    case 64:
      return launch_copy<64>(a, scratch, s, stream);
    case 128:
      return launch_copy<128>(a, scratch, s, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace detllm::kernels::cuda
