// The decode schedule of the tensor-core attention: one warp per (token, KV head, run of KV
// splits), each warp with its own cp.async ring of K/V tiles in shared memory, nothing shared
// between the warps of a CTA (no __syncthreads). Every split's state goes to the partials and
// the merge kernel folds them in ascending order — or, when a warp ran every split of its rows,
// the warp folds them itself with the same merge_row. For n_rep ≤ 8 the chosen warp is the
// transposed one (attention_tc_decode_nq.cu: Sᵀ = K·Qᵀ, quarter tiles, 16 warps a CTA); this
// file's row-layout warp runs n_rep 9–16 and the forced chunks 1 and 2.
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
#include "kernels/cuda/attention_tc_decode_nq.h"
#include "kernels/cuda/attention_tc_decode_warp.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {
namespace {

using namespace tc;

// A chunk of the ring (attention_tc_decode_warp.cuh) is half a K or V tile, 32 positions: the
// scores and the P·V k-steps of a tile are made half by half, in the same order as whole
// (tile_qk_part, tile_values_part). The chunk size, the ring depth and the copies' prefetch are
// free (same bits); the configuration compiled is the one chosen by measurement: half tiles
// (1–10% faster than whole tiles where this warp runs), a ring of 3 (8 warps), the prefetch.
constexpr int kDecDefaultRing = 3;
constexpr int kChunkRows = kKvTile / 2;

// grid attention_decode_grid (the plan), block W = kDecWarps<NBUF, kChunkRows> warps; warp w
// runs decode_item(w).
template <int HD, int NBUF, bool KV8>
__global__ void __launch_bounds__(kDecWarps<NBUF, kChunkRows> * 32)
    attention_tc_decode_kernel(const AttentionArgs a, float scale_log2, float* partials,
                               int max_splits, int splits_per_warp, int n_zc) {
  constexpr int W = kDecWarps<NBUF, kChunkRows>;
  using Ring = DecodeRing<HD, NBUF, kChunkRows, kDecDefaultPrefetch, KV8>;
  constexpr int CPT = Ring::CPT;  // tile f: chunks 4f, 4f + 1 of K, 4f + 2, 4f + 3 of V
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const DecodeItem it = start_decode_warp<W>(a, splits_per_warp, n_zc);
  const int lane = threadIdx.x & 31, gq = lane >> 2, cq = lane & 3;
  if (!it.ok) return;  // warp-uniform
  Ring ring(smem_raw, a, it, lane);

  // The thread's rows gq and gq + 8: query heads g·n_rep + r of token t.
  const int n_rep = a.n_heads / a.n_kv_heads;
  int lim[2];
  const float* qr[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = gq + 8 * i;
    lim[i] = r < n_rep ? it.pos : -1;
    qr[i] = r < n_rep ? a.q + (static_cast<int64_t>(it.t) * a.n_heads + it.g * n_rep + r) * HD
                      : nullptr;
  }
  uint32_t qf[HD / 16][4];
  load_q_fragments<HD>(qf, qr, cq);

  SplitState<HD> st;
  float s[kKvTile / 8][4];
  constexpr int NT = kKvTile / 8, KS = kKvTile / 16;  // n8 score tiles, P·V k-steps
  for (int f = 0; f < it.n_tiles; ++f) {
    const int start = it.range_begin + f * kKvTile;
    if (start % kTcSplit == 0) st.reset();  // a split starts: its state from zero
    tile_qk_part<HD, 0, NT / 2>(ring.ready(CPT * f), qf, s);
    __syncwarp();  // each buffer is free for the chunk NBUF − 1 after it
    tile_qk_part<HD, NT / 2, NT / 2>(ring.ready(CPT * f + 1), qf, s);
    __syncwarp();
    tile_softmax<HD, true>(start, lim, scale_log2, st, s);
    tile_values_part<HD, 0, KS / 2>(ring.ready(CPT * f + 2), s, st);
    __syncwarp();
    tile_values_part<HD, KS / 2, KS / 2>(ring.ready(CPT * f + 3), s, st);
    __syncwarp();
    if ((start + kKvTile) % kTcSplit != 0 && f + 1 < it.n_tiles) continue;
    const int z = start / kTcSplit;  // the end of split z: store its state
#pragma unroll
    for (int i = 0; i < 2; ++i)
      if (lim[i] >= 0)
        store_partial<HD>(partials,
                          static_cast<int64_t>(it.t) * a.n_heads + it.g * n_rep + gq + 8 * i,
                          max_splits, z, st, i);
  }
  if (n_zc != 1) return;
  __syncwarp();  // the warp ran every split of its rows: it merges them (its own partials)
  const int64_t row0 = static_cast<int64_t>(it.t) * a.n_heads + it.g * n_rep;
  for (int r = 0; r < n_rep; ++r) merge_row<HD>(a, partials, row0 + r, max_splits, lane);
}

// The row-layout warp's chosen configuration (n_rep 9–16): half tiles, a ring of 3, the
// copies' L2 prefetch: 8 warps a CTA.
// An FP8 cache (a.k_fp8): the ring's in-place dequantizing form (attention_tc_decode_warp.cuh).
template <int HD>
cudaError_t launch_halves(const AttentionArgs& a, float* scratch, const AttentionPlan& p,
                          cudaStream_t stream) {
  constexpr int NBUF = kDecDefaultRing;
  constexpr int W = kDecWarps<NBUF, kChunkRows>;
  constexpr size_t SMEM = decode_smem_bytes<HD, NBUF, kChunkRows>();
  if (a.k_fp8 != nullptr)
    return launch_decode_warps<HD, W, SMEM, attention_tc_decode_kernel<HD, NBUF, true>>(
        a, scratch, p, stream);
  return launch_decode_warps<HD, W, SMEM, attention_tc_decode_kernel<HD, NBUF, false>>(
      a, scratch, p, stream);
}

}  // namespace

cudaError_t launch_attention_tc_decode(const AttentionArgs& a, float* scratch,
                                       const AttentionPlan& p, cudaStream_t stream) {
  if (p.kernel != AttentionKernel::kDecodeWarps || scratch == nullptr ||
      !attention_kernel_applies(AttentionKernel::kDecodeWarps, attention_step_shape(a, 1)))
    return cudaErrorInvalidValue;
  if (p.transposed) return launch_attention_tc_decode_nq(a, scratch, p, stream);
  if (p.ring != kDecDefaultRing) return cudaErrorInvalidValue;
  return with_head_dim(a.head_dim, [&](auto hd) {
    return launch_halves<decltype(hd)::value>(a, scratch, p, stream);
  });
}

}  // namespace detllm::kernels::cuda
