// What the two decode warps share (attention_tc_decode.cu: the row-layout warp, S = Q·Kᵀ;
// attention_tc_decode_nq.cu: the transposed warp, Sᵀ = K·Qᵀ): which (token, KV head, run of
// splits) a warp runs and the warp's cp.async ring of K/V chunks (the grid that covers them,
// host code: attention_tc_grid.h).
// None of it touches a value: only which warp reads which cache rows, and when.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_fp8_load.cuh"
#include "kernels/cuda/attention_tc_common.cuh"

namespace detllm::kernels::cuda::tc {

constexpr int kDecDefaultPrefetch = 128;  // L2 prefetch size of the copies (bytes; 0 none)

// The work of one warp: token t, KV head g, the positions [range_begin, range_end) of its run
// of splits, n_tiles KV tiles; ok = false: no such work (the grid's last CTA, or a run of
// splits past the token's position).
struct DecodeItem {
  int t, g, pos, range_begin, range_end, n_tiles;
  bool ok;
};

// Warp w of the grid: token w % n_tokens, then run zc of splits [zc·S, zc·S + S) (S =
// splits_per_warp, n_zc runs), then KV head g.
__device__ __forceinline__ DecodeItem decode_item(const AttentionArgs& a, int64_t w,
                                                  int splits_per_warp, int n_zc) {
  DecodeItem it{};
  it.t = static_cast<int>(w % a.n_tokens);
  const int64_t rest = w / a.n_tokens;
  const int zc = static_cast<int>(rest % n_zc);
  it.g = static_cast<int>(rest / n_zc);
  it.ok = it.g < a.n_kv_heads;
  if (!it.ok) return it;
  it.pos = a.positions[it.t];
  const int n_splits = it.pos / kTcSplit + 1;
  const int z_begin = zc * splits_per_warp;
  it.ok = z_begin < n_splits;
  if (!it.ok) return it;
  const int z_end = min(z_begin + splits_per_warp, n_splits);
  it.range_begin = z_begin * kTcSplit;
  it.range_end = min(z_end * kTcSplit, it.pos + 1);
  it.n_tiles = (it.range_end - it.range_begin + kKvTile - 1) / kKvTile;
  return it;
}

// The decode kernels' start: waits for the kernel before (launched with PDL when a.pdl:
// pdl.cuh), lets the next one launch, and returns this thread's warp's item in a CTA of W warps.
template <int W>
__device__ __forceinline__ DecodeItem start_decode_warp(const AttentionArgs& a, int splits_per_warp,
                                                        int n_zc) {
  pdl_wait();
  pdl_release();
  return decode_item(a, static_cast<int64_t>(blockIdx.x) * W + (threadIdx.x >> 5), splits_per_warp,
                     n_zc);
}

// An FP8 KV cache (KV8) in a decode ring: a chunk's codes are copied (cp.async, 8 codes a piece)
// into the tail of the chunk's own bf16 buffer — ROWS · HD bytes ending where the buffer ends —
// and, once landed, the warp turns them into the buffer's bf16 rows in place, dequant8's
// bf16(dec(code) · scale) of the packed CTA's load: so the tile the MMAs read holds the values
// the packed CTA's tile holds, and every later step is the bf16 cache's. In place, G rows at a
// time (512 codes: 16 a lane), each group read whole before any of it is written: this holds
// when no group's bf16 rows reach the codes of the groups after it — true for every schedule
// compiled with it (static_assert), since a bf16 row (kLd<HD> · 2 bytes) is longer than a code
// row (HD bytes), so the writes start far enough ahead of the codes they chase.
template <int HD, int ROWS>
inline constexpr int kKv8PassRows = 512 / HD < ROWS ? 512 / HD : ROWS;  // G: 512 codes' rows
template <int HD, int ROWS>
constexpr bool kv8_in_place() {
  constexpr int row2 = kLd<HD> * 2, codes = ROWS * HD, tail = ROWS * row2 - codes;
  constexpr int g = kKv8PassRows<HD, ROWS>;
  for (int j = 0; j + g < ROWS; j += g)
    if ((j + g - 1) * row2 + 2 * HD > tail + (j + g) * HD) return false;
  return tail % 16 == 0;
}

// A warp's ring of NBUF chunks of ROWS K or V rows (kLd<HD> apart) in shared memory. Chunk c
// of the warp's range: tile c / CPT, then its K chunks (PK of them, ROWS positions each), then
// its V chunks. Rows past range_end are zeros (the cache is not read there). PREFETCH: the
// copies' L2 prefetch (0 or 128 bytes; the same data). KV8: the cache is FP8 codes with per-KV-
// head scales (above).
template <int HD, int NBUF, int ROWS, int PREFETCH, bool KV8 = false>
struct DecodeRing {
  static constexpr int LD = kLd<HD>;
  static constexpr int PK = kKvTile / ROWS;  // chunks of one K (or V) tile
  static constexpr int CPT = 2 * PK;         // chunks of one tile
  static constexpr int CH = HD / 8;          // 16-byte pieces of one K/V row
  static constexpr int RPP = 32 / CH;        // rows the warp copies per pass
  static constexpr int PASSES = ROWS / RPP;  // passes per chunk
  static_assert(32 % CH == 0 && ROWS % RPP == 0 && kKvTile % ROWS == 0, "whole rows per pass");
  static_assert(!KV8 || kv8_in_place<HD, ROWS>(), "the codes turn into bf16 rows in place");
  static constexpr int TAIL = ROWS * LD * 2 - ROWS * HD;  // KV8: the codes' byte offset

  __nv_bfloat16* ring;
  const int* table;
  const uint16_t* k_src;
  const uint16_t* v_src;
  const uint8_t* k8;   // KV8: the codes of this KV head
  const uint8_t* v8;
  float k_scale, v_scale;  // KV8: this KV head's scales
  uint32_t row_elems;  // elements per cache slot
  int range_begin, range_end, block_size, block_shift, n_chunks, lane;
  // Lane j holds the slots of positions start + j and start + 32 + j of the tile being issued
  // (cur) and of the next one (nxt, looked up a tile ahead so a copy never waits on the block
  // table); -1 past range_end.
  int cur0, cur1, nxt0, nxt1;

  __device__ __forceinline__ int slot_of(int p) const {
    return kv_slot(table, p, range_end, block_size, block_shift);
  }

  // The warp's ring in the CTA's shared memory `cta_smem` (one ring a warp, in warp order);
  // primes it: chunks 0 … NBUF − 2 in flight (one commit group each).
  __device__ __forceinline__ DecodeRing(void* cta_smem, const AttentionArgs& a,
                                        const DecodeItem& it, int lane_)
      : ring(static_cast<__nv_bfloat16*>(cta_smem) + (threadIdx.x >> 5) * NBUF * ROWS * LD),
        table(a.block_tables + static_cast<int64_t>(a.seq_of_token[it.t]) * a.max_blocks),
        k_src(a.k_bf16 + it.g * HD),
        v_src(a.v_bf16 + it.g * HD),
        k8(KV8 ? a.k_fp8 + it.g * HD : nullptr),
        v8(KV8 ? a.v_fp8 + it.g * HD : nullptr),
        k_scale(KV8 ? a.k_scale[it.g] : 0.0f),
        v_scale(KV8 ? a.v_scale[it.g] : 0.0f),
        row_elems(static_cast<uint32_t>(a.n_kv_heads) * HD),
        range_begin(it.range_begin),
        range_end(it.range_end),
        block_size(a.block_size),
        block_shift(block_shift_of(a.block_size)),
        n_chunks(CPT * it.n_tiles),
        lane(lane_) {
    cur0 = slot_of(range_begin + lane);
    cur1 = slot_of(range_begin + 32 + lane);
    nxt0 = slot_of(range_begin + kKvTile + lane);
    nxt1 = slot_of(range_begin + kKvTile + 32 + lane);
#pragma unroll
    for (int c = 0; c < NBUF - 1; ++c) {
      if (c < n_chunks) issue(c);
      cp_async_commit();
    }
  }

  // The copies of chunk c into its buffer (not committed).
  __device__ __forceinline__ void issue(int c) {
    __nv_bfloat16* buf = ring + (c % NBUF) * ROWS * LD;
    const int part = c % CPT;
    const uint16_t* src = part >= PK ? v_src : k_src;
    const int d = (lane % CH) * 8;
    const int first = (part % PK) * ROWS;  // the chunk's first row in the tile
#pragma unroll
    for (int k = 0; k < PASSES; ++k) {
      const int j = lane / CH + RPP * k;  // the chunk row this lane copies
      // Tile row first + j: its slot is in cur0 (rows 0–31) or cur1 (32–63) of lane row & 31
      // (first + RPP·k and 32 are multiples of RPP, so the lane's own offset never crosses).
      const bool upper = first + RPP * k >= 32;
      const int slot = __shfl_sync(kFull, upper ? cur1 : cur0, (first + j) & 31);
      if constexpr (KV8) {
        const uint8_t* src8 = (part >= PK ? v8 : k8) + d;
        const uint32_t s8 = slot < 0 ? 0u : static_cast<uint32_t>(slot);
        ptx::cp_async8_zfill(reinterpret_cast<unsigned char*>(buf) + TAIL + j * HD + d,
                             src8 + static_cast<uint64_t>(s8) * row_elems, slot < 0 ? 0 : 8);
      } else {
        copy_chunk<PREFETCH>(buf + j * LD + d, src + d, slot, row_elems);
      }
    }
    if (part == CPT - 1) {  // the tile's last V chunk is issued: on to the next tile's slots
      const int next = range_begin + (c / CPT + 2) * kKvTile;
      cur0 = nxt0;
      cur1 = nxt1;
      nxt0 = slot_of(next + lane);
      nxt1 = slot_of(next + 32 + lane);
    }
  }

  // Chunk c has landed for every lane; the chunk NBUF − 1 after it is issued into the buffer
  // chunk c − 1 freed (the caller's __syncwarp after using a chunk frees its buffer).
  __device__ __forceinline__ const __nv_bfloat16* ready(int c) {
    if (c + NBUF - 1 < n_chunks) issue(c + NBUF - 1);
    cp_async_commit();
    cp_async_wait<NBUF - 1>();
    __syncwarp();
    __nv_bfloat16* buf = ring + (c % NBUF) * ROWS * LD;
    if constexpr (KV8) dequantize(buf, c % CPT >= PK ? v_scale : k_scale);
    return buf;
  }

  // KV8: the landed codes of a chunk (at TAIL) into its bf16 rows, G rows a pass (16 codes a
  // lane; lanes past the chunk's codes idle), each pass's codes read before it writes.
  __device__ __forceinline__ void dequantize(__nv_bfloat16* buf, float scale) {
    constexpr int G = kKv8PassRows<HD, ROWS>;
    constexpr int LANES = G * HD / 16;                   // lanes a pass
    const unsigned char* codes = reinterpret_cast<const unsigned char*>(buf) + TAIL;
#pragma unroll 1
    for (int j = 0; j < ROWS; j += G) {
      uint4 raw = make_uint4(0u, 0u, 0u, 0u);
      if (lane < LANES) raw = *reinterpret_cast<const uint4*>(codes + j * HD + lane * 16);
      __syncwarp();  // the pass's codes are all read before its rows are written
      if (lane < LANES) {
        const int row = j + lane * 16 / HD, col = lane * 16 % HD;
        uint4* dst = reinterpret_cast<uint4*>(buf + row * LD + col);
        dst[0] = dequant8(make_uint2(raw.x, raw.y), scale);
        dst[1] = dequant8(make_uint2(raw.z, raw.w), scale);
      }
    }
    __syncwarp();
  }
};

// Bytes of shared memory of a CTA of W warps of the ring above.
template <int HD, int NBUF, int ROWS, int W = kDecWarps<NBUF, ROWS>>
constexpr size_t decode_smem_bytes() {
  return sizeof(__nv_bfloat16) * W * NBUF * ROWS * kLd<HD>;
}

// Runs KERNEL, a decode-warp kernel of W warps a CTA and SMEM bytes of shared memory, on the
// plan's grid (attention_decode_grid, kernels/attention_plan.h), then the merge kernel — unless
// each warp ran every split of its rows (n_zc 1) and merged them itself.
template <int HD, int W, size_t SMEM, auto KERNEL>
cudaError_t launch_decode_warps(const AttentionArgs& a, float* scratch, const AttentionPlan& p,
                                cudaStream_t stream) {
  if (p.warps_per_cta != W || p.blocks <= 0) return cudaErrorInvalidValue;
  static const cudaError_t attr = cudaFuncSetAttribute(
      KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(SMEM));
  if (attr != cudaSuccess) return attr;
  const cudaError_t err =
      launch_pdl(a.pdl, KERNEL, static_cast<unsigned>(p.blocks), W * 32, SMEM, stream, a,
                 a.scale * kLog2e, scratch, p.max_splits, p.splits_per_warp, p.n_zc);
  if (err != cudaSuccess || p.n_zc == 1) return err;
  return launch_merge_partials<HD>(a, scratch, p.max_splits, stream);
}

// Calls f(std::integral_constant<int, I>{}) for I = 0 … N − 1 (register arrays indexed by I).
template <int I, int N, class F>
__device__ __forceinline__ void static_for(F&& f) {
  if constexpr (I < N) {
    f(std::integral_constant<int, I>{});
    static_for<I + 1, N>(f);
  }
}

}  // namespace detllm::kernels::cuda::tc
