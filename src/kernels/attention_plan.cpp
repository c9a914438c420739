// The tensor-core attention's planner (attention_plan.h).
#include "kernels/attention_plan.h"

#include <fmt/format.h>

#include <algorithm>

namespace detllm::kernels {
namespace {

constexpr int kWarpRows = 16;  // rows of one m16n8k16 tile
// A row's splits stay in its CTA when the step has at least this many CTAs (enough to fill the
// card); fewer run a CTA per split and the merge kernel (kPackedStreams: 128-row CTAs, fewer).
constexpr int64_t kMaxCtasInBlock = 1024;
constexpr int64_t kStreamsMaxCtasInBlock = 256;
constexpr size_t kMaxSplitScratch = size_t(512) << 20;   // bytes of split partials at most
constexpr size_t kMaxDecodeScratch = size_t(512) << 20;  // the decode warps' partials at most
// The decode warps' shared memory: kDecRingTiles K/V tiles a CTA, as a ring of `ring` chunks of
// `rows` positions for each warp.
constexpr int kDecRingTiles = 12;
constexpr int decode_warps(int ring, int rows) {
  return kDecRingTiles * (kAttentionTcTile / rows) / ring;
}

int n_rep_of(const AttentionStepShape& s) {
  return s.n_kv_heads > 0 ? s.n_heads / s.n_kv_heads : 0;
}
bool decode_like(const AttentionStepShape& s) { return s.n_tokens <= 2 * s.n_seqs; }
int64_t items_of(const AttentionStepShape& s) {
  return int64_t{s.n_tokens} * s.n_kv_heads * attention_max_splits(s);
}

// The CTA kernels' split placement: a CTA per split while the step has too few CTAs to fill the
// card and its partials fit the scratch limit.
bool split_blocks_of(const AttentionStepShape& s, const AttentionPlan& p, int force_split) {
  if (force_split >= 0) return force_split == 1;
  const int64_t ctas = int64_t{(s.n_tokens + p.tq - 1) / p.tq} * s.n_kv_heads;
  const int64_t few =
      p.kernel == AttentionKernel::kPackedStreams ? kStreamsMaxCtasInBlock : kMaxCtasInBlock;
  return ctas < few && p.max_splits > 1 &&
         sizeof(float) * attention_partials_floats(s) <= kMaxSplitScratch;
}

AttentionPlan decode_plan(const AttentionStepShape& s, AttentionPlan p, int force_split) {
  p.kernel = AttentionKernel::kDecodeWarps;
  p.transposed = n_rep_of(s) <= kAttentionTransposedMaxRep;
  // The transposed warp on quarter tiles (16 rows a chunk), the ring by the step; the
  // row-layout warp on half tiles (32 rows) in a ring of 3, its copies with an L2 prefetch.
  p.ring = p.transposed ? attention_quarter_ring(s) : 3;
  p.warps_per_cta = decode_warps(p.ring, p.transposed ? kAttentionTcTile / 4 : kAttentionTcTile / 2);
  const AttentionDecodeGrid g = attention_decode_grid(s, p.warps_per_cta, force_split);
  p.splits_per_warp = g.per_warp;
  p.n_zc = g.n_zc;
  p.blocks = g.blocks;
  p.warps = 0;
  p.tq = 1;
  p.scratch_floats = attention_partials_floats(s);
  return p;
}

// A CTA kernel's plan.
AttentionPlan cta_plan(const AttentionStepShape& s, AttentionPlan p, AttentionKernel kernel,
                       int force_split) {
  const int n_rep = n_rep_of(s);
  p.kernel = kernel;
  switch (kernel) {
    case AttentionKernel::kSharedSplit:
      p.warps = 4;
      p.tq = p.decode_like ? 1 : kWarpRows / n_rep;
      break;
    case AttentionKernel::kWarpgroup:
      // One instantiation a head dim: a ring of 3 K/V tiles and the fast path (the steps it is
      // chosen for are not decode-like; forced on decode-like ones, the fast path skips the
      // selects only where no row is masked: the same values).
      p.warps = 4;
      p.tq = p.decode_like ? 1 : (4 * kWarpRows) / n_rep;
      p.fast = true;
      p.q_smem = s.head_dim == 64;
      break;
    case AttentionKernel::kPackedStreams:
      p.warps = 8;
      p.tq = (4 * 2 * kWarpRows) / n_rep;
      break;
    case AttentionKernel::kPacked:
    case AttentionKernel::kDecodeWarps:
      p.kernel = AttentionKernel::kPacked;
      p.warps = 4;
      p.tq = p.decode_like ? 1 : (4 * kWarpRows) / n_rep;
      p.fast = !p.decode_like;
      break;
  }
  p.split_blocks = split_blocks_of(s, p, force_split);
  p.scratch_floats = p.split_blocks ? attention_partials_floats(s) : 0;
  return p;
}

// The chosen kernel (H200, docs/cuda.md):
//  - decode-like steps (≤ 2 query tokens a sequence) with ≥ 512 (token, KV head, split) items:
//    the decode warps (faster from ~512 items on, 1.3× at batch 8 × 2048; below, the CTAs,
//    whose warps all copy for the computing one, are 1.15–1.25× faster);
//  - other decode-like steps: the shared-split CTA while its split CTAs fit one wave of the
//    card (at 1 × 8192, 256 CTAs, it took 22 µs against the packed CTAs' 20), else the packed
//    CTA (a token a CTA);
//  - other steps: the warpgroup CTA where it runs (head_dim 128: 1.34–1.42× the best mma.sync
//    shape; head_dim 64, Q from shared memory, from 512 CTAs: 1.18–1.56× at 1,024–5,876 CTAs,
//    0.97–1.0× at 75–293); else from 6144 tokens at head_dim ≥ 64 the two streams of 32-row
//    warps (1.11–1.18× at 8192 and 16384; 0.88–0.97× at 2048–4096); else the packed CTA with
//    the fast path.
AttentionKernel chosen_kernel(const AttentionStepShape& s, bool decode_like_step) {
  const int n_rep = n_rep_of(s);
  if (decode_like_step) {
    if (attention_kernel_applies(AttentionKernel::kDecodeWarps, s) &&
        items_of(s) >= kAttentionDecodeMinItems)
      return AttentionKernel::kDecodeWarps;
    if (attention_kernel_applies(AttentionKernel::kSharedSplit, s) &&
        items_of(s) <= kAttentionPlanSms)
      return AttentionKernel::kSharedSplit;
    return AttentionKernel::kPacked;
  }
  if (attention_kernel_applies(AttentionKernel::kWarpgroup, s)) {
    const int tq = (4 * kWarpRows) / n_rep;
    const int64_t ctas = int64_t{(s.n_tokens + tq - 1) / tq} * s.n_kv_heads;
    if (s.head_dim != 64 || ctas >= kAttentionWgHd64MinCtas) return AttentionKernel::kWarpgroup;
  }
  if (s.n_tokens >= kAttentionStreamsMinTokens &&
      attention_kernel_applies(AttentionKernel::kPackedStreams, s))
    return AttentionKernel::kPackedStreams;
  return AttentionKernel::kPacked;
}

}  // namespace

const char* attention_kernel_name(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kDecodeWarps:
      return "decode warps";
    case AttentionKernel::kSharedSplit:
      return "shared-split CTA";
    case AttentionKernel::kWarpgroup:
      return "warpgroup CTA";
    case AttentionKernel::kPacked:
      return "packed CTA";
    case AttentionKernel::kPackedStreams:
      return "packed streams";
  }
  return "?";
}

bool attention_tc_supported(int32_t head_dim, int32_t n_rep) {
  return (head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128) && n_rep >= 1 &&
         n_rep <= 4 * kWarpRows;
}

int attention_max_splits(const AttentionStepShape& s) {
  const int64_t max_len = int64_t{s.max_blocks} * s.block_size;
  return static_cast<int>((max_len + kAttentionTcSplit - 1) / kAttentionTcSplit);
}

size_t attention_partials_floats(const AttentionStepShape& s) {
  return static_cast<size_t>(s.n_tokens) * s.n_heads * attention_max_splits(s) *
         (s.head_dim + 2);
}

bool attention_kernel_applies(AttentionKernel kernel, const AttentionStepShape& s) {
  const int n_rep = n_rep_of(s);
  if (s.n_kv_heads <= 0 || s.n_heads % s.n_kv_heads != 0 ||
      !attention_tc_supported(s.head_dim, n_rep))
    return false;
  if (s.kv_fp8 && kernel != AttentionKernel::kDecodeWarps && kernel != AttentionKernel::kPacked)
    return false;
  switch (kernel) {
    case AttentionKernel::kDecodeWarps:
      return n_rep <= kAttentionDecodeMaxRep && s.n_tokens > 0 &&
             sizeof(float) * attention_partials_floats(s) <= kMaxDecodeScratch;
    case AttentionKernel::kSharedSplit:
      return n_rep <= kWarpRows;
    case AttentionKernel::kWarpgroup:
      // Q in registers at head_dim 64 is refused: CUDA 13.0's ptxas reuses Q's registers
      // inside the tile loop there (scripts/check_wgmma_sass.py); Q from shared memory runs.
      return s.head_dim == 128 || s.head_dim == 64;
    case AttentionKernel::kPackedStreams:
      return s.head_dim >= 64;
    case AttentionKernel::kPacked:
      return true;
  }
  return false;
}

AttentionDecodeGrid attention_decode_grid(const AttentionStepShape& s, int warps_per_cta,
                                          int force_split) {
  AttentionDecodeGrid d;
  d.max_splits = attention_max_splits(s);
  d.per_warp = 1;
  const int64_t row_warps = int64_t{s.n_tokens} * s.n_kv_heads;
  if (force_split == 0 ||
      (force_split != 1 && d.max_splits <= kAttentionWholeRowSplits &&
       row_warps >= int64_t{kAttentionPlanSms} * warps_per_cta * 3 / 4)) {
    d.per_warp = d.max_splits;
  } else if (force_split != 1) {
    const int64_t target = int64_t{kAttentionPlanSms} * warps_per_cta * 2;
    const int64_t items = int64_t{s.n_tokens} * s.n_kv_heads * d.max_splits;
    d.per_warp =
        static_cast<int>(std::clamp<int64_t>((items + target - 1) / target, 1, d.max_splits));
  }
  d.n_zc = (d.max_splits + d.per_warp - 1) / d.per_warp;
  const int64_t warps = int64_t{s.n_tokens} * d.n_zc * s.n_kv_heads;
  d.blocks = (warps + warps_per_cta - 1) / warps_per_cta;
  return d;
}

int attention_quarter_ring(const AttentionStepShape& s) {
  return items_of(s) >= int64_t{kAttentionPlanSms} * decode_warps(3, kAttentionTcTile / 4) * 3 / 4
             ? 3
             : 6;
}

AttentionPlan plan_attention(const AttentionStepShape& s, const AttentionForce& force) {
  AttentionPlan p;
  p.decode_like = decode_like(s);
  p.max_splits = attention_max_splits(s);
  AttentionKernel kernel = chosen_kernel(s, p.decode_like);
  if (force.kernel >= 0 && force.kernel < kAttentionKernels &&
      attention_kernel_applies(static_cast<AttentionKernel>(force.kernel), s))
    kernel = static_cast<AttentionKernel>(force.kernel);
  if (kernel == AttentionKernel::kDecodeWarps) return decode_plan(s, p, force.split);
  return cta_plan(s, p, kernel, force.split);
}

std::string describe(const AttentionPlan& p) {
  if (p.kernel == AttentionKernel::kDecodeWarps)
    return fmt::format("decode warps ({} warp, {} ring {}, {} warps a CTA, {} of {} splits a "
                       "warp, {}; {} CTAs)",
                       p.transposed ? "transposed" : "row-layout",
                       p.transposed ? "quarter-tile" : "half-tile", p.ring, p.warps_per_cta,
                       p.splits_per_warp, p.max_splits,
                       p.n_zc == 1 ? "merged in the warp" : "merge kernel", p.blocks);
  std::string s = fmt::format("{} ({} warps, {} token{} a CTA", attention_kernel_name(p.kernel),
                              p.warps, p.tq, p.tq == 1 ? "" : "s");
  if (p.fast) s += ", fast path";
  if (p.kernel == AttentionKernel::kWarpgroup)
    s += p.q_smem ? ", Q in shared memory" : ", Q in registers";
  s += p.split_blocks ? fmt::format(", a CTA per split of {} + merge kernel)", p.max_splits)
                      : fmt::format(", {} split{} in the CTA)", p.max_splits,
                                    p.max_splits == 1 ? "" : "s");
  return s;
}

}  // namespace detllm::kernels
