// The tensor-core attention's warpgroup schedule (wgmma, sm_90a) for prefill, chunks and mixed
// steps: attention_tc.cu's packed CTA of 4 warps × 16 rows (the same grid: rows, KV tiles of
// kKvTile positions aligned to 0, splits of kTcSplit, the same split placements and merge), with
// the two products on warpgroup MMAs that read K and V from shared memory once for all 64 rows
// instead of once per warp through ldmatrix.
//
// Why the bits are attention_tc.cu's (design.md Rule 2; the tests force this schedule and
// compare every row against the other schedules):
//   - per element, S = Q·Kᵀ is the same chain of k16 MMA steps over the head dims ascending,
//     from zero accumulators (wgmma with scale-d = 1 on zeroed registers, as mma.sync adds its
//     zero C), and O += P·V the same chain over the tile's positions in k16 steps ascending;
//     wgmma's k16 step gives mma.sync's bits (design.md section 6 measured both in one GEMM);
//   - wgmma's register fragments are mma.sync's: a warp's A is the m16n8k16 A fragment of its
//     16 rows (load_q_fragments, and P packed from S as tile_values does), and its part of the
//     64×64 accumulator is eight m16n8 C tiles, so tile_softmax runs unchanged on them (row
//     max and sum over the thread's 16 values in column order, then xor-shuffles 1, 2);
//   - O's 128 columns are two 64-column MMAs (one per 64-dim panel of V): the columns do not
//     interact, so the split changes no element.
// K/V tiles in shared memory: per 64-dim panel, 64 rows of 128 bytes with the 16-byte chunks
// XORed by (row % 8) (the 128-byte swizzle wgmma reads), 1024-byte aligned.
// Chosen for non-decode-like steps (kernels/attention_plan.h): at head_dim 128 with Q in
// registers, at head_dim 64 with Q in shared memory from 512 CTAs (Q in registers is refused
// there, below). Tests: test_cuda --gtest_filter='*CudaAttentionTc*' (CudaOptions::
// attention_kernel forces it); bench: cuda_attention_bench [--heads Q,KV,D].
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_tc_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {

namespace {

using namespace tc;
using ptx::fence_proxy_async_smem;
using ptx::wgmma_commit;
using ptx::wgmma_desc_sw128;
using ptx::wgmma_fence;
using ptx::wgmma_fence_operands;
using ptx::wgmma_m64n64k16_rs;
using ptx::wgmma_m64n64k16_ss;
using ptx::wgmma_wait0;

constexpr int kWgWarps = 4;                  // one warpgroup: 64 rows
constexpr int kPanelBytes = kKvTile * 128;   // 64 rows × 64 bf16 dims
template <int HD>
constexpr int kTileBytes = (HD / 64) * kPanelBytes;

// Byte offset of 16-byte chunk c (8 dims) of row j in a tile.
__device__ __forceinline__ int wg_chunk_at(int j, int c) {
  return (c >> 3) * kPanelBytes + j * 128 + (((c & 7) ^ (j & 7)) << 4);
}

// Copies the K/V rows of the tile at `start` (positions ≥ range_end: zeros, never read from the
// cache; V must be finite where p = 0) into the tiles at `kb` and `vb` (V skipped if null), in
// the layout of wg_chunk_at: thread t copies 16-byte chunk t % (HD / 8) of rows t / (HD / 8) + P·k.
// With a block_shift (≥ 0) a thread looks its rows' blocks up itself, and its shared-memory
// offsets step by P rows (P is a multiple of 8, so the swizzle's row % 8 does not change);
// otherwise the tile's 64 slots are computed by the warp's lanes and passed round by shuffles.
// Either way every element lands where the other way puts it: only the address arithmetic differs.
template <int HD>
__device__ __forceinline__ void load_rows(unsigned char* kb, unsigned char* vb,
                                          const uint16_t* k_src, const uint16_t* v_src,
                                          const AttentionArgs& a, const int* table, int start,
                                          int range_end, int g, int block_shift) {
  constexpr int CH = HD / 8;
  constexpr int P = kWgWarps * 32 / CH;  // rows a pass
  static_assert(kKvTile % P == 0 && P % 8 == 0, "whole rows a pass, the swizzle's row % 8 fixed");
  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * HD;
  const int c = threadIdx.x % CH, j0 = threadIdx.x / CH;
  const int at0 = wg_chunk_at(j0, c);
  const int64_t col = static_cast<int64_t>(g) * HD + c * 8;
  if (block_shift >= 0) {
    // Straight-line copies: a position past the range reads its row's last valid slot with a
    // source size of 0, which cp.async fills with zeros.
    const int mask = (1 << block_shift) - 1;
    const uint32_t row_bytes = static_cast<uint32_t>(kv_stride) * 2;
    const char* kbase = reinterpret_cast<const char*>(k_src + col);
    const int64_t v_delta = vb ? reinterpret_cast<const char*>(v_src) -
                                     reinterpret_cast<const char*>(k_src)
                               : 0;
#pragma unroll
    for (int k = 0; k < kKvTile / P; ++k) {
      const int p = start + j0 + P * k;
      const int pc = min(p, range_end - 1);
      const uint32_t slot = (static_cast<uint32_t>(table[pc >> block_shift]) << block_shift) |
                            static_cast<uint32_t>(pc & mask);
      const char* src = kbase + static_cast<uint64_t>(slot) * row_bytes;
      const int n = p < range_end ? 16 : 0;
      const int at = at0 + k * P * 128;
      ptx::cp_async16_zfill(kb + at, src, n);
      if (vb) ptx::cp_async16_zfill(vb + at, src + v_delta, n);
    }
    return;
  }
  const int lane = threadIdx.x & 31;
  const int s0 = kv_slot(table, start + lane, range_end, a.block_size, -1);
  const int s1 = kv_slot(table, start + 32 + lane, range_end, a.block_size, -1);
#pragma unroll
  for (int k = 0; k < kKvTile / P; ++k) {
    const int j = j0 + P * k;
    const int a0 = __shfl_sync(kFull, s0, j & 31), a1 = __shfl_sync(kFull, s1, j & 31);
    const int slot = j < 32 ? a0 : a1;
    const int at = wg_chunk_at(j, c);
    copy_chunk(kb + at, k_src + col, slot, static_cast<uint32_t>(kv_stride));
    if (vb) copy_chunk(vb + at, v_src + col, slot, static_cast<uint32_t>(kv_stride));
  }
}

// S (the warp's 16 rows × 64 positions, m16n8 C tiles) = Q·Kᵀ over the K tile at shared address
// `k_tile`: k16 steps over the head dims ascending, from zero. Q is the warp's fragments `qf`,
// or (QS) the CTA's rows staged at `q_tile` in the K tile's layout by stage_q: the SS form, no
// register operand read asynchronously (attention_wg_supported says why that matters).
template <int HD, bool QS>
__device__ __forceinline__ void wg_qk(uint32_t k_tile, uint32_t q_tile,
                                      const uint32_t (&qf)[HD / 16][4],
                                      float (&s)[kKvTile / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < kKvTile / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
  wgmma_fence_operands(s);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const uint32_t at = (kk >> 2) * kPanelBytes + (kk & 3) * 32;
    if constexpr (QS) {
      wgmma_m64n64k16_ss(s, wgmma_desc_sw128(q_tile + at), wgmma_desc_sw128(k_tile + at));
    } else {
      wgmma_m64n64k16_rs<0>(s, qf[kk], wgmma_desc_sw128(k_tile + at));
    }
  }
  wgmma_commit();
  wgmma_wait0();
  wgmma_fence_operands(s);
}

// Q's 64 rows into shared memory at `q_tile` in the K tile's swizzled layout, each element
// rounded to bf16 as load_q_fragments rounds it (rows without a (token, head): zeros).
template <int HD>
__device__ __forceinline__ void stage_q(unsigned char* q_tile, const AttentionArgs& a, int tq,
                                        int t_begin, int t_end, int g, int n_rep) {
  constexpr int CH = HD / 8;
  for (int i = threadIdx.x; i < kKvTile * CH; i += blockDim.x) {
    const int r = i / CH, c = i % CH;
    const int t = t_begin + r / n_rep;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < tq * n_rep && t < t_end) {
      const int64_t row = static_cast<int64_t>(t) * a.n_heads + g * n_rep + r % n_rep;
      const float* src = a.q + row * HD + c * 8;
      const float4 lo = *reinterpret_cast<const float4*>(src);
      const float4 hi = *reinterpret_cast<const float4*>(src + 4);
      v = make_uint4(pack_bf16(lo.x, lo.y), pack_bf16(lo.z, lo.w), pack_bf16(hi.x, hi.y),
                     pack_bf16(hi.z, hi.w));
    }
    *reinterpret_cast<uint4*>(q_tile + wg_chunk_at(r, c)) = v;
  }
}

// o += P (bf16, from S) · V over the V tile at `v_tile`: k16 steps over the positions
// ascending, one 64-column MMA per panel of head dims.
template <int HD>
__device__ __forceinline__ void wg_pv(uint32_t v_tile, const float (&s)[kKvTile / 8][4],
                                      SplitState<HD>& st) {
  uint32_t pa[kKvTile / 16][4];
#pragma unroll
  for (int j = 0; j < kKvTile / 16; ++j) p_fragment(s, j, pa[j]);
  wgmma_fence_operands(st.o);
  wgmma_fence();
#pragma unroll
  for (int p = 0; p < HD / 64; ++p) {
    float(&o)[8][4] = *reinterpret_cast<float(*)[8][4]>(&st.o[8 * p][0]);
#pragma unroll
    for (int j = 0; j < kKvTile / 16; ++j)
      wgmma_m64n64k16_rs<1>(o, pa[j], wgmma_desc_sw128(v_tile + p * kPanelBytes + j * 16 * 128));
  }
  wgmma_commit();
  wgmma_wait0();
  wgmma_fence_operands(st.o);
}

// grid (ceil(n_tokens / tq), n_kv_heads, split_blocks ? max_splits : 1), block 128 threads;
// everything as attention_tc_kernel<HD, 4, ST, FAST> except where the products run. QS: Q from
// shared memory (staged once, before the ring) instead of registers.
template <int HD, int ST, bool FAST, bool QS>
__global__ void __launch_bounds__(kWgWarps * 32)
    attention_wg_kernel(const AttentionArgs a, int tq, float scale_log2, float* partials,
                        int max_splits, bool split_blocks) {
  static_assert(HD == 64 || HD == 128, "whole 64-dim panels");
  static_assert(ST >= 2, "a ring of two tiles at least");
  constexpr int DT = HD / 8;  // n-tiles of O
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // 1024-byte aligned (the swizzle atoms): [Q tile if QS] then the ring, ST × (K tile, V tile).
  const uint32_t raw = ptx::smem_u32(smem_raw);
  const uint32_t pad = ((raw + 1023u) & ~1023u) - raw;
  constexpr int kQBytes = QS ? kTileBytes<HD> : 0;
  unsigned char* ring = smem_raw + pad + kQBytes;
  const uint32_t q_u32 = raw + pad;
  const uint32_t ring_u32 = raw + pad + kQBytes;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gq = lane >> 2, cq = lane & 3;
  const int g = blockIdx.y;
  const int n_rep = a.n_heads / a.n_kv_heads;
  const int t_begin = (gridDim.x - 1 - blockIdx.x) * tq;
  const int t_end = min(t_begin + tq, a.n_tokens);

  const PackedRows<HD> rows(a, warp, gq, t_begin, t_end, tq, g, n_rep);
  uint32_t qf[HD / 16][4];  // !QS: Q's fragments
  if constexpr (QS) {
    stage_q<HD>(smem_raw + pad, a, tq, t_begin, t_end, g, n_rep);
    fence_proxy_async_smem();  // visible to the MMAs once the ring's first barrier has passed
  } else {
    load_q_fragments<HD>(qf, rows.q, cq);
  }

  float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f};
  float O[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) O[dt][0] = O[dt][1] = O[dt][2] = O[dt][3] = 0.0f;

  const int block_shift = block_shift_of(a.block_size);

  for (int seg_begin = t_begin; seg_begin < t_end;) {
    const SegmentSplits sg = segment_splits(a, seg_begin, t_end, split_blocks);
    const int seg_end = sg.end, max_pos = sg.max_pos, n_splits = sg.n_splits;
    const int z_begin = sg.z_begin, z_end = sg.z_end;
    const int* table = sg.table;
    int lim[2];
    rows.limits(seg_begin, seg_end, lim);
    const int warp_lo = FAST ? warp_min(min(lim[0], lim[1])) : -1;
    if (z_begin >= n_splits) {
      seg_begin = seg_end;
      continue;
    }
    const int range_begin = z_begin * kTcSplit;
    const int range_end = min(min(z_end, n_splits) * kTcSplit, max_pos + 1);
    const int n_tiles = (range_end - range_begin + kKvTile - 1) / kKvTile;
    {
      auto load_tile = [&](int buf, int start) {
        unsigned char* kb = ring + buf * 2 * kTileBytes<HD>;
        load_rows<HD>(kb, kb + kTileBytes<HD>, a.k_bf16, a.v_bf16, a, table, start, range_end, g,
                      block_shift);
      };
      SplitState<HD> st;
      st.reset();

#pragma unroll
      for (int p = 0; p < ST - 1; ++p) {
        if (p < n_tiles) load_tile(p, range_begin + p * kKvTile);
        cp_async_commit();
      }
      int buf = 0;
      for (int f = 0; f < n_tiles; ++f) {
        const int start = range_begin + f * kKvTile;
        const int z = start / kTcSplit, first = z * kTcSplit;
        if (start == first) st.reset();
        cp_async_wait<ST - 2>();   // this thread's copies of tile f have landed
        fence_proxy_async_smem();  // and are visible to the warpgroup MMA
        __syncthreads();           // everyone's, and everyone is done with tile f − 1
        const int nb = buf == 0 ? ST - 1 : buf - 1;  // tile f − 1's slot: tile f + ST − 1's
        if (f + ST - 1 < n_tiles) load_tile(nb, start + (ST - 1) * kKvTile);
        cp_async_commit();
        {
          // Every warp runs every tile (the MMAs are the warpgroup's); a tile past all of a
          // warp's rows leaves their state bit-identical (masked scores, c = 1).
          float s[kKvTile / 8][4];
          const uint32_t kt = ring_u32 + buf * 2 * kTileBytes<HD>;
          wg_qk<HD, QS>(kt, q_u32, qf, s);
          if (FAST && start + kKvTile - 1 <= warp_lo) {
            tile_softmax<HD, false>(start, lim, scale_log2, st, s);
          } else {
            tile_softmax<HD, true>(start, lim, scale_log2, st, s);
          }
          wg_pv<HD>(kt + kTileBytes<HD>, s, st);
        }
        buf = buf + 1 == ST ? 0 : buf + 1;
        if ((start + kKvTile) % kTcSplit != 0 && f + 1 < n_tiles) continue;
        end_split<HD>(a, rows, lim, first, z, split_blocks, partials, max_splits, st, M, L, O);
      }
    }
    __syncthreads();  // the ring is free for the next segment's tiles
    seg_begin = seg_end;
  }
  if (split_blocks) return;
  store_rows<HD>(a, rows, O, L, cq);
}

template <int HD, int ST, bool FAST, bool QS>
cudaError_t launch_wg(const AttentionArgs& a, int tq, float* scratch, bool split,
                      cudaStream_t stream) {
  const int max_splits = max_splits_of(a);
  // The ring, Q's tile (QS) and the alignment pad.
  constexpr size_t smem = size_t(ST * 2 + (QS ? 1 : 0)) * kTileBytes<HD> + 1024;
  static const cudaError_t attr = cudaFuncSetAttribute(
      attention_wg_kernel<HD, ST, FAST, QS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(smem));
  cudaError_t err = attr;
  if (err != cudaSuccess) return err;
  const dim3 grid((a.n_tokens + tq - 1) / tq, a.n_kv_heads, split ? max_splits : 1);
  attention_wg_kernel<HD, ST, FAST, QS>
      <<<grid, kWgWarps * 32, smem, stream>>>(a, tq, a.scale * kLog2e, scratch, max_splits, split);
  err = cudaGetLastError();
  if (err != cudaSuccess || !split) return err;
  return launch_merge_partials<HD>(a, scratch, max_splits, stream);
}

}  // namespace

// Q in registers: head_dim 128 only. At head_dim 64 CUDA 13.0's ptxas compiles the fast-path
// kernels so that the registers holding Q's fragments (the QK wgmma's A operand) are reused for
// the softmax inside the KV-tile loop: from the second tile on S is computed from garbage (on
// the H200: rows past the first tile wrong, 0.129 for 0.117). scripts/check_wgmma_sass.py finds
// it in the SASS (CTest cuda_static.*, in CI). So head_dim 64 runs with Q in shared memory (the
// wgmma SS form: the loop has no register operand to lose; its bits checked on the H200).
// One instantiation a head dim, the one the planner chooses (kernels/attention_plan.h): a ring
// of 3 K/V tiles and the fast path. (The ring of 2, the kernels without the fast path and Q in
// shared memory at head_dim 128 were never chosen and are no longer instantiated.)
cudaError_t launch_attention_wg(const AttentionArgs& a, int tq, float* scratch, bool split,
                                cudaStream_t stream) {
  // Compiled, never launched: the register-Q head_dim-64 fast-path kernels, which CUDA 13.0's
  // ptxas miscompiles, kept as the negative control of scripts/check_wgmma_sass.py (CTest
  // cuda_static.wgmma_sass_catches_known_clobber must find them clobbered).
  static const void* const volatile known_clobbered[] = {
      reinterpret_cast<const void*>(attention_wg_kernel<64, 2, true, false>),
      reinterpret_cast<const void*>(attention_wg_kernel<64, 3, true, false>)};
  (void)known_clobbered;
  const int n_rep = a.n_kv_heads > 0 ? a.n_heads / a.n_kv_heads : 0;
  if (n_rep < 1 || n_rep > kWgWarps * kWarpRows) return cudaErrorInvalidValue;
  if (a.head_dim == 64) return launch_wg<64, 3, true, true>(a, tq, scratch, split, stream);
  if (a.head_dim == 128) return launch_wg<128, 3, true, false>(a, tq, scratch, split, stream);
  return cudaErrorInvalidValue;
}

}  // namespace detllm::kernels::cuda
