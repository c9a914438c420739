// The grid of the tensor-core attention, host side: the numerics constants of the reduction
// grid (tiles and splits, aligned to position 0), the partials' size, and the decode warps'
// launch geometry (attention_tc_decode*.cu) — which warp runs which splits, never what a row
// computes. Host code only, so the choices are tested on the CPU (tests/cuda/
// cuda_decode_grid_test.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda::tc {

constexpr int kKvTile = 64;    // positions per KV tile, aligned to absolute 0 (numerics)
constexpr int kTcSplit = 256;  // positions per KV split, aligned to absolute 0 (numerics)
static_assert(kTcSplit % kKvTile == 0, "a split is whole tiles");
// Merge counters at the front of the attention scratch (a CTA per split merged by the group's
// last CTA: one per group of CTAs that share tokens and a KV head; zero between launches).
constexpr int64_t kTcMergeCounters = 4096;
constexpr int kSms = 132;  // the H200's SMs, for the grid choices (any count: same bits)

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
// NBUF warps for chunks of ROWS positions (a whole K or V tile, a half or a quarter).
constexpr int kDecRingTiles = 12;
template <int NBUF, int ROWS>
constexpr int kDecWarps = kDecRingTiles*(kKvTile / ROWS) / NBUF;

// The grid of a decode warp of W warps a CTA: splits a warp runs (force_split 0: all of a
// row's, 1: one; chosen: all of a row's when the rows are short — at most kWholeRowSplits
// splits of the block table's width, so no warp runs long beside short ones — and their warps
// fill 3/4 of the card's SMs, else aimed at two waves of the card's warps, one CTA an SM — any
// count gives the same bits), the runs of splits per row, and the CTAs. n_zc == 1: each warp
// merges its rows itself (merge_row, the merge kernel's function) and no merge kernel runs.
constexpr int kWholeRowSplits = 4;
struct DecodeGrid {
  int max_splits, per_warp, n_zc;
  unsigned blocks;
};
inline DecodeGrid decode_grid(const AttentionArgs& a, int warps_per_cta, int force_split) {
  DecodeGrid d{};
  d.max_splits = max_splits_of(a);
  d.per_warp = 1;
  const int64_t row_warps = static_cast<int64_t>(a.n_tokens) * a.n_kv_heads;
  if (force_split == 0 || (force_split != 1 && d.max_splits <= kWholeRowSplits &&
                           row_warps >= int64_t{kSms} * warps_per_cta * 3 / 4)) {
    d.per_warp = d.max_splits;
  } else if (force_split != 1) {
    const int64_t target = int64_t{kSms} * warps_per_cta * 2;
    const int64_t items = static_cast<int64_t>(a.n_tokens) * a.n_kv_heads * d.max_splits;
    d.per_warp =
        static_cast<int>(std::clamp<int64_t>((items + target - 1) / target, 1, d.max_splits));
  }
  d.n_zc = (d.max_splits + d.per_warp - 1) / d.per_warp;
  const int64_t warps = static_cast<int64_t>(a.n_tokens) * d.n_zc * a.n_kv_heads;
  d.blocks = static_cast<unsigned>((warps + warps_per_cta - 1) / warps_per_cta);
  return d;
}

// The ring of the transposed warp's quarter tiles chosen for a step: 3 (16 warps) when the
// step's (token, KV head, split) items fill at least 3/4 of the card's SMs with 16-warp CTAs,
// else 6 (8 warps: twice the SMs busy for few items). H200, quarters at Llama-8B heads
// (docs/cuda.md, "Decode: the transposed warp"), ring 3 ÷ ring 6 in time: 1.11 at 1 × 32768
// (1,024 items), 1.35 at 8 × 2048 (512); 0.97 at 8 × 8192 (2,048), 0.98 at 64 × 2048 and
// 256 × 512 (4,096).
inline int decode_quarter_ring(const AttentionArgs& a) {
  const int64_t items = static_cast<int64_t>(a.n_tokens) * a.n_kv_heads * max_splits_of(a);
  return items >= int64_t{kSms} * kDecWarps<3, kKvTile / 4> * 3 / 4 ? 3 : 6;
}

}  // namespace detllm::kernels::cuda::tc
