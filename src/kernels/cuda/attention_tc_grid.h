// The grid of the tensor-core attention, host side: the numerics constants of the reduction
// grid (tiles and splits, aligned to position 0; kernels/attention_plan.h defines them), the
// partials' size, and the decode warps' CTA size. Which kernel, CTA, split placement and decode
// grid a step runs is the planner's (kernels/attention_plan.h, tested on the CPU).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/attention_plan.h"
#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda::tc {

constexpr int kKvTile = kAttentionTcTile;    // positions per KV tile (numerics)
constexpr int kTcSplit = kAttentionTcSplit;  // positions per KV split (numerics)
static_assert(kTcSplit % kKvTile == 0, "a split is whole tiles");

// Splits of a row of the block table's full width.
inline int max_splits_of(const AttentionArgs& a) {
  const int64_t max_len = static_cast<int64_t>(a.max_blocks) * a.block_size;
  return static_cast<int>((max_len + kTcSplit - 1) / kTcSplit);
}

// Floats of the split partials (store_partial's layout) of every row of the step.
inline size_t partials_floats(const AttentionArgs& a) {
  return static_cast<size_t>(a.n_tokens) * a.n_heads * max_splits_of(a) * (a.head_dim + 2);
}

// A CTA holds kDecRingTiles K/V tiles (209 KB at head_dim 128) as a ring of NBUF chunks for
// each of its warps, NBUF − 1 chunks in flight per warp: kDecRingTiles · (kKvTile / ROWS) /
// NBUF warps for chunks of ROWS positions (a whole K or V tile, a half or a quarter). The
// planner counts the same (AttentionPlan::warps_per_cta; launch_decode_warps checks they agree).
constexpr int kDecRingTiles = 12;
template <int NBUF, int ROWS>
constexpr int kDecWarps = kDecRingTiles*(kKvTile / ROWS) / NBUF;

}  // namespace detllm::kernels::cuda::tc
