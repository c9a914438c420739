// The tensor-core attention's planner (kernels/attention_plan.h), CPU only:
//  - the chosen plans equal the choices the CUDA backend made before the planner existed (the
//    branching of attention_tc.cu's tc_shape, use_decode_schedule and use_split_blocks and of
//    the decode warps' chunk and ring, transcribed below as `before`), on every shape of a grid
//    of batch × context × heads × head_dim × step kind (decode, prefill, chunks, mixed) — so
//    the planner launches the same kernels with the same parameters;
//  - the documented choices on a few named steps (docs/cuda.md);
//  - every plan, chosen or forced, is valid: its CTA holds its rows, its decode grid gives
//    every (token, KV head, split) a warp, and it asks for the scratch its launch uses.
// The CUDA bit tests (test_cuda --gtest_filter='*CudaAttentionTc*') show every plan gives the
// same bits. Run: build/tests/test_kernels --gtest_filter='AttentionPlan*'
#include "kernels/attention_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace detllm::kernels {
namespace {

// What the CUDA backend chose before the planner (the defaults of every TcSchedule field),
// transcribed from attention_tc.cu / attention_tc_decode*.cu / attention_tc_grid.h at
// 7f6ac3e.
struct Before {
  std::string kernel;  // "decode", "wg", "shared", "mt", "tc"
  int warps = 0, m_tiles = 0, stages = 0, streams = 0, tq = 0;
  bool fast = false, q_smem = false, split = false;
  int chunk = 0, ring = 0;  // decode: 4 quarters on the transposed warp / 2 halves; the ring
};

Before before(const AttentionStepShape& a) {
  constexpr int kWarpRows = 16, kSms = 132;
  const int n_rep = a.n_heads / a.n_kv_heads;
  const int max_splits =
      static_cast<int>((int64_t{a.max_blocks} * a.block_size + 255) / 256);
  const size_t partials = size_t(a.n_tokens) * a.n_heads * max_splits * (a.head_dim + 2);
  Before b;
  // use_decode_schedule (decode -1) and attention_tc_decode_applies
  const bool applies = n_rep >= 1 && n_rep <= kWarpRows && a.n_tokens > 0 &&
                       sizeof(float) * partials <= (size_t(512) << 20);
  const int64_t items = int64_t{a.n_tokens} * a.n_kv_heads * max_splits;
  if (applies && a.n_tokens <= 2 * a.n_seqs && items >= 512) {
    b.kernel = "decode";
    b.chunk = n_rep <= 8 ? 4 : 2;  // decode_chunk_of(0): quarters, n_rep > 8 halves
    b.ring = b.chunk == 4 ? (items >= int64_t{kSms} * 16 * 3 / 4 ? 3 : 6) : 3;
    return b;
  }
  // tc_shape with every field at its default
  const bool decode_like = a.n_tokens <= 2 * a.n_seqs;
  const bool chosen = !decode_like;
  const int wg_tq = n_rep <= 4 * kWarpRows ? (4 * kWarpRows) / n_rep : 1;
  const int64_t ctas_wg = int64_t{(a.n_tokens + wg_tq - 1) / wg_tq} * a.n_kv_heads;
  const bool hd64 = a.head_dim == 64;
  const bool wg = chosen && (!hd64 || ctas_wg >= 512);
  const bool q_smem = hd64;
  const bool wg_supported = (a.head_dim == 128 || (q_smem && a.head_dim == 64)) &&
                            n_rep >= 1 && n_rep <= 4 * kWarpRows;
  if (wg && wg_supported) {
    b = {"wg", 4, 1, 3, 1, decode_like ? 1 : (4 * kWarpRows) / n_rep, !decode_like, q_smem};
  } else if (n_rep <= kWarpRows && decode_like && items <= kSms) {
    b = {"shared", 4, 1, 2, 1, 1, false};
  } else if (!decode_like && a.n_tokens >= 6144 && a.head_dim >= 64) {
    b = {"mt", 4, 2, 2, 2, (4 * 2 * kWarpRows) / n_rep, false};
  } else {
    b = {"tc", 4, 1, 2, 1, decode_like ? 1 : (4 * kWarpRows) / n_rep, !decode_like};
  }
  // use_split_blocks (split -1)
  const int64_t ctas = int64_t{(a.n_tokens + b.tq - 1) / b.tq} * a.n_kv_heads;
  const int64_t few = b.m_tiles == 2 ? 256 : 1024;
  b.split = ctas < few && max_splits > 1 && sizeof(float) * partials <= (size_t(512) << 20);
  return b;
}

const char* kind_of(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kDecodeWarps:
      return "decode";
    case AttentionKernel::kSharedSplit:
      return "shared";
    case AttentionKernel::kWarpgroup:
      return "wg";
    case AttentionKernel::kPacked:
      return "tc";
    case AttentionKernel::kPackedStreams:
      return "mt";
  }
  return "?";
}

struct Heads {
  int n_heads, n_kv_heads, head_dim;
};
// Llama-3.1-8B, SmolLM2-135M, tiny-llama, odd ones, n_rep 8, 16 and 64, MHA.
const Heads kHeads[] = {{32, 8, 128}, {9, 3, 64}, {4, 2, 16}, {8, 2, 32}, {16, 2, 64}, {2, 1, 64},
                        {32, 2, 32},  {8, 2, 128}, {64, 1, 128}, {12, 12, 64}, {28, 4, 128}};

// Steps of every kind: decode (a token a sequence), prefill (one sequence), chunks, mixed.
std::vector<AttentionStepShape> shapes() {
  std::vector<AttentionStepShape> out;
  for (const Heads& h : kHeads)
    for (const int block_size : {16, 24})
      for (const int context : {1, 100, 256, 512, 1100, 2048, 8192, 32768})
        for (const int batch : {1, 2, 8, 64, 256}) {
          AttentionStepShape s;
          s.n_heads = h.n_heads;
          s.n_kv_heads = h.n_kv_heads;
          s.head_dim = h.head_dim;
          s.block_size = block_size;
          s.max_blocks = (context + block_size - 1) / block_size;
          s.n_seqs = batch;
          for (const int per_seq : {1, 2, 3, 7, 64, 512})  // tokens each sequence brings
            for (const int prefill : {0, 1, 6144, 16384}) {  // + one prompt's tokens (mixed)
              if (per_seq > context || prefill > context) continue;
              s.n_tokens = batch * per_seq + prefill;
              s.n_seqs = batch + (prefill > 0 ? 1 : 0);
              out.push_back(s);
            }
        }
  return out;
}

std::string name_of(const AttentionStepShape& s) {
  return "heads " + std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv_heads) + "x" +
         std::to_string(s.head_dim) + ", " + std::to_string(s.n_tokens) + " tokens of " +
         std::to_string(s.n_seqs) + " seqs, " + std::to_string(s.max_blocks) + " blocks of " +
         std::to_string(s.block_size);
}

TEST(AttentionPlan, ChosenPlansAreTheChoicesBeforeThePlanner) {
  int n = 0;
  int seen[kAttentionKernels] = {};
  for (const AttentionStepShape& s : shapes()) {
    ASSERT_TRUE(attention_tc_supported(s.head_dim, s.n_heads / s.n_kv_heads));
    const AttentionPlan p = plan_attention(s);
    const Before b = before(s);
    SCOPED_TRACE(name_of(s) + ": " + describe(p));
    ++n;
    ++seen[static_cast<int>(p.kernel)];
    ASSERT_EQ(kind_of(p.kernel), b.kernel);
    if (p.kernel == AttentionKernel::kDecodeWarps) {
      EXPECT_EQ(p.transposed, b.chunk == 4);
      EXPECT_EQ(p.ring, b.ring);
      continue;
    }
    EXPECT_EQ(p.tq, b.tq);
    EXPECT_EQ(p.fast, b.fast);
    EXPECT_EQ(p.split_blocks, b.split);
    EXPECT_EQ(p.warps, b.kernel == "mt" ? 8 : 4);
    if (p.kernel == AttentionKernel::kWarpgroup) {
      EXPECT_EQ(p.q_smem, b.q_smem);
    }
  }
  EXPECT_GT(n, 5000);
  for (int k = 0; k < kAttentionKernels; ++k)
    EXPECT_GT(seen[k], 0) << attention_kernel_name(static_cast<AttentionKernel>(k))
                          << " is chosen on no shape of the grid";
}

AttentionStepShape llama8b(int batch, int per_seq, int context) {
  AttentionStepShape s;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.head_dim = 128;
  s.block_size = 16;
  s.max_blocks = (context + 15) / 16;
  s.n_seqs = batch;
  s.n_tokens = batch * per_seq;
  return s;
}

// The choices docs/cuda.md describes, on named steps.
TEST(AttentionPlan, DocumentedChoices) {
  // Batch 1 decode at 512: the shared-split CTA (2 splits × 8 KV heads, one wave), split.
  AttentionPlan p = plan_attention(llama8b(1, 1, 512));
  EXPECT_EQ(p.kernel, AttentionKernel::kSharedSplit) << describe(p);
  EXPECT_TRUE(p.split_blocks);
  // Batch 1 at 8192: 256 split CTAs, past one wave: the packed CTA, a CTA per split.
  p = plan_attention(llama8b(1, 1, 8192));
  EXPECT_EQ(p.kernel, AttentionKernel::kPacked) << describe(p);
  EXPECT_FALSE(p.fast);
  EXPECT_EQ(p.tq, 1);
  // Batch 8 at 2048 (512 items): the decode warps, transposed, quarter ring 6 (few items).
  p = plan_attention(llama8b(8, 1, 2048));
  EXPECT_EQ(p.kernel, AttentionKernel::kDecodeWarps) << describe(p);
  EXPECT_TRUE(p.transposed);
  EXPECT_EQ(p.ring, 6);
  EXPECT_EQ(p.warps_per_cta, 8);
  // Batch 64 at 2048 (4,096 items): quarter ring 3, 16 warps a CTA.
  p = plan_attention(llama8b(64, 1, 2048));
  EXPECT_EQ(p.kernel, AttentionKernel::kDecodeWarps) << describe(p);
  EXPECT_EQ(p.ring, 3);
  EXPECT_EQ(p.warps_per_cta, 16);
  // Batch 256 at 512: short rows filling the card, each warp merges its own (no merge kernel).
  p = plan_attention(llama8b(256, 1, 512));
  EXPECT_EQ(p.n_zc, 1) << describe(p);
  EXPECT_EQ(p.splits_per_warp, p.max_splits);
  // A prompt of 8192 tokens at head_dim 128: the warpgroup CTA, Q in registers, fast path.
  p = plan_attention(llama8b(1, 8192, 8192));
  EXPECT_EQ(p.kernel, AttentionKernel::kWarpgroup) << describe(p);
  EXPECT_FALSE(p.q_smem);
  EXPECT_TRUE(p.fast);
  EXPECT_EQ(p.tq, 16);
  // SmolLM2 (9/3 × 64): a short prompt stays on mma.sync (few CTAs), a long one goes to wgmma
  // with Q in shared memory.
  AttentionStepShape smol{100, 1, 9, 3, 64, 16, 7};
  p = plan_attention(smol);
  EXPECT_EQ(p.kernel, AttentionKernel::kPacked) << describe(p);
  EXPECT_TRUE(p.fast);
  smol = {8192, 1, 9, 3, 64, 16, 512};
  p = plan_attention(smol);
  EXPECT_EQ(p.kernel, AttentionKernel::kWarpgroup) << describe(p);
  EXPECT_TRUE(p.q_smem);
  // Head dim 64 with one KV head of one query head: 8192 tokens are 128 wgmma CTAs, too few:
  // the two streams of 32-row warps.
  AttentionStepShape mha{8192, 1, 1, 1, 64, 16, 512};
  p = plan_attention(mha);
  EXPECT_EQ(p.kernel, AttentionKernel::kPackedStreams) << describe(p);
  EXPECT_EQ(p.warps, 8);
  // n_rep 16 decode: the row-layout warp on half tiles.
  AttentionStepShape wide{64, 64, 32, 2, 32, 16, 128};
  p = plan_attention(wide);
  EXPECT_EQ(p.kernel, AttentionKernel::kDecodeWarps) << describe(p);
  EXPECT_FALSE(p.transposed);
  EXPECT_EQ(p.ring, 3);
}

void expect_valid(const AttentionStepShape& s, const AttentionPlan& p, const AttentionForce& f) {
  const int n_rep = s.n_heads / s.n_kv_heads;
  EXPECT_TRUE(attention_kernel_applies(p.kernel, s));
  EXPECT_EQ(p.max_splits, attention_max_splits(s));
  if (p.kernel == AttentionKernel::kDecodeWarps) {
    EXPECT_LE(n_rep, p.transposed ? kAttentionTransposedMaxRep : kAttentionDecodeMaxRep);
    EXPECT_TRUE(p.ring == 3 || (p.transposed && p.ring == 6));
    EXPECT_GE(int64_t{p.splits_per_warp} * p.n_zc, p.max_splits);
    EXPECT_LT(int64_t{p.splits_per_warp} * (p.n_zc - 1), p.max_splits);
    EXPECT_GE(p.blocks * p.warps_per_cta, int64_t{s.n_tokens} * s.n_kv_heads * p.n_zc);
    EXPECT_EQ(p.scratch_floats, attention_partials_floats(s));
    if (f.split == 0) {
      EXPECT_EQ(p.n_zc, 1);
    }
    if (f.split == 1) {
      EXPECT_EQ(p.splits_per_warp, 1);
    }
    return;
  }
  // The CTA's rows hold its tokens' heads.
  const int rows = p.kernel == AttentionKernel::kSharedSplit ? 16
                   : p.kernel == AttentionKernel::kPackedStreams ? 128
                                                                 : 64;
  EXPECT_GE(p.tq, 1);
  EXPECT_LE(p.tq * n_rep, std::max(rows, n_rep));
  if (p.kernel == AttentionKernel::kSharedSplit) {
    EXPECT_LE(n_rep, 16);
  }
  EXPECT_EQ(p.scratch_floats, p.split_blocks ? attention_partials_floats(s) : 0);
  if (f.split >= 0) {
    EXPECT_EQ(p.split_blocks, f.split == 1);
  }
}

TEST(AttentionPlan, EveryPlanChosenOrForcedIsValid) {
  for (const AttentionStepShape& s : shapes()) {
    for (int kernel = -1; kernel < kAttentionKernels; ++kernel)
      for (const int split : {-1, 0, 1}) {
        const AttentionForce f{kernel, split};
        const AttentionPlan p = plan_attention(s, f);
        SCOPED_TRACE(name_of(s) + ", force kernel " + std::to_string(kernel) + " split " +
                     std::to_string(split) + ": " + describe(p));
        expect_valid(s, p, f);
        const auto k = static_cast<AttentionKernel>(kernel);
        if (kernel >= 0 && attention_kernel_applies(k, s)) {
          EXPECT_EQ(p.kernel, k);
        }
        if (kernel >= 0 && !attention_kernel_applies(k, s)) {
          EXPECT_EQ(p.kernel, plan_attention(s, {-1, split}).kernel);
        }
        if (HasFailure()) return;
      }
  }
}

TEST(AttentionPlan, ApplicabilityAndGridEdges) {
  EXPECT_FALSE(attention_tc_supported(96, 1));
  EXPECT_FALSE(attention_tc_supported(128, 65));
  AttentionStepShape s{1, 1, 32, 8, 16, 16, 1};
  EXPECT_FALSE(attention_kernel_applies(AttentionKernel::kWarpgroup, s));
  EXPECT_FALSE(attention_kernel_applies(AttentionKernel::kPackedStreams, s));
  s = {1, 1, 32, 1, 128, 16, 1};  // n_rep 32
  EXPECT_FALSE(attention_kernel_applies(AttentionKernel::kDecodeWarps, s));
  EXPECT_FALSE(attention_kernel_applies(AttentionKernel::kSharedSplit, s));
  // The quarter ring's threshold: 3/4 of 132 SMs × 16 warps = 1,584 items.
  AttentionStepShape q{1584, 1584, 8, 1, 128, 256, 1};  // 1 split a row
  EXPECT_EQ(attention_quarter_ring(q), 3);
  q.n_tokens = q.n_seqs = 1583;
  EXPECT_EQ(attention_quarter_ring(q), 6);
}

// An FP8 cache: the planner offers only the kernels that dequantize it (the decode warps and
// the packed CTA), chosen or forced, on decode and prefill steps; the same steps on a bf16
// cache plan the other kernels (so the FP8 case is not vacuous).
TEST(AttentionPlan, AnFp8CachePlansOnlyTheKernelsThatDequantize) {
  const AttentionStepShape steps[] = {
      {1, 1, 32, 8, 128, 16, 64},          // batch-1 decode: shared-split CTA on bf16
      {64, 64, 32, 8, 128, 16, 128},       // batch-64 decode: decode warps
      {4096, 1, 32, 8, 128, 16, 256},      // prefill: warpgroup CTA on bf16
      {8192, 1, 32, 8, 64, 16, 512}};      // long prefill, head_dim 64
  bool bf16_other = false;
  for (AttentionStepShape s : steps) {
    const AttentionKernel bf16 = plan_attention(s, {}).kernel;
    bf16_other = bf16_other || (bf16 != AttentionKernel::kDecodeWarps &&
                                bf16 != AttentionKernel::kPacked);
    s.kv_fp8 = true;
    for (int k = -1; k < kAttentionKernels; ++k) {
      AttentionForce force;
      force.kernel = k;
      const AttentionKernel got = plan_attention(s, force).kernel;
      EXPECT_TRUE(got == AttentionKernel::kDecodeWarps || got == AttentionKernel::kPacked)
          << s.n_tokens << " tokens, forced " << k << ": " << attention_kernel_name(got);
    }
    EXPECT_EQ(attention_kernel_applies(AttentionKernel::kPacked, s), true);
    EXPECT_FALSE(attention_kernel_applies(AttentionKernel::kSharedSplit, s));
    EXPECT_FALSE(attention_kernel_applies(AttentionKernel::kWarpgroup, s));
    EXPECT_FALSE(attention_kernel_applies(AttentionKernel::kPackedStreams, s));
  }
  EXPECT_TRUE(bf16_other);
}


// The decode warps' grid (moved here from tests/cuda/cuda_decode_grid_test.cpp): every
// (token, KV head, split) item has a warp under every placement, whole rows are chosen only for
// short rows that fill the card, the forced placements do what they say.
AttentionStepShape grid_args(int n_tokens, int n_kv_heads, int max_blocks, int block_size) {
  return AttentionStepShape{n_tokens, n_tokens, 4 * n_kv_heads, n_kv_heads, 128, block_size,
                            max_blocks};
}

TEST(AttentionPlan, DecodeGridGivesEveryItemAWarpUnderEveryPlacement) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const AttentionStepShape a = grid_args(1 + int(rng() % 600), 1 + int(rng() % 8),
                                           1 + int(rng() % 2100), 1 << (rng() % 6));
    for (int warps : {4, 8, 12, 16})
      for (int force : {-1, 0, 1}) {
        const AttentionDecodeGrid d = attention_decode_grid(a, warps, force);
        ASSERT_EQ(d.max_splits, attention_max_splits(a));
        ASSERT_GE(d.per_warp, 1);
        ASSERT_LE(d.per_warp, d.max_splits);
        ASSERT_GE(int64_t{d.n_zc} * d.per_warp, d.max_splits) << "a split without a warp";
        ASSERT_LT(int64_t{d.n_zc - 1} * d.per_warp, d.max_splits) << "a run of no splits";
        ASSERT_GE(d.blocks * warps, int64_t{a.n_tokens} * d.n_zc * a.n_kv_heads);
        ASSERT_LT((d.blocks - 1) * warps, int64_t{a.n_tokens} * d.n_zc * a.n_kv_heads);
        if (force == 0) {
          ASSERT_EQ(d.n_zc, 1);
        }
        if (force == 1) {
          ASSERT_EQ(d.per_warp, 1);
        }
        if (force == -1 && d.n_zc == 1 && d.max_splits > 1) {
          // Whole rows (the warp merges them) only for short rows whose warps fill the card,
          // or when two waves' worth of items per warp is a whole row anyway.
          const int64_t row_warps = int64_t{a.n_tokens} * a.n_kv_heads;
          const int64_t two_waves = int64_t{kAttentionPlanSms} * warps * 2;
          const bool short_rows = d.max_splits <= kAttentionWholeRowSplits &&
                                  row_warps >= int64_t{kAttentionPlanSms} * warps * 3 / 4;
          ASSERT_TRUE(short_rows || row_warps * d.max_splits > two_waves * (d.max_splits - 1))
              << a.n_tokens << " tokens, " << d.max_splits << " splits, " << warps << " warps";
        }
      }
  }
}

TEST(AttentionPlan, DecodeGridOnTheMeasuredSteps) {
  // Llama-8B heads, blocks of 16; the table as wide as the context (+1 block past 512).
  const AttentionDecodeGrid step256 = attention_decode_grid(grid_args(256, 8, 33, 16), 16, -1);
  EXPECT_EQ(step256.n_zc, 1) << "the batch-256 step merges its rows in the warps";
  EXPECT_EQ(step256.blocks, 128);
  EXPECT_GT(attention_decode_grid(grid_args(8, 8, 2048, 16), 16, -1).n_zc, 1)
      << "8 × 32768: long rows are spread over warps";
  EXPECT_GT(attention_decode_grid(grid_args(256, 8, 128, 16), 16, -1).n_zc, 1)
      << "256 × 2048: 8 splits";
  EXPECT_GT(attention_decode_grid(grid_args(64, 8, 33, 16), 16, -1).n_zc, 1)
      << "512 row warps: too few";
  EXPECT_EQ(attention_quarter_ring(grid_args(1, 8, 2048, 16)), 6);  // 1 × 32768: 1,024 items
  EXPECT_EQ(attention_quarter_ring(grid_args(8, 8, 128, 16)), 6);   // 8 × 2048: 512
  EXPECT_EQ(attention_quarter_ring(grid_args(8, 8, 512, 16)), 3);   // 8 × 8192: 2,048
  EXPECT_EQ(attention_quarter_ring(grid_args(256, 8, 32, 16)), 3);  // 256 × 512: 4,096
  EXPECT_EQ(attention_quarter_ring(grid_args(198, 8, 16, 16)), 3);  // 1,584: the threshold
  EXPECT_EQ(attention_quarter_ring(grid_args(1583, 1, 16, 16)), 6);
}

}  // namespace
}  // namespace detllm::kernels
