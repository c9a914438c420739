// The describers of the kernel families (describe.h).
#include "verify/reduction_order/describe.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/gemm_buckets.h"
#include "kernels/gemm_splits.h"

namespace detllm::reduction_order {
namespace {

constexpr int kMmaK = 16;     // mma.m16n8k16: one k-step reduces 16 inputs
constexpr int kCpuLanes = 8;  // the CPU kernels' fp32 lanes (kernels/cpu/simd.h, x86-64-v3)
constexpr int kCudaNormThreads = 256;  // row_reduce.cuh's kNormThreads (its one reduction tree)

// The order `o` with every range moved by `offset` (a chunk's GEMM inside the full K).
Order shifted(Order o, int64_t offset) {
  o.lo += offset;
  o.hi += offset;
  o.valid_hi += offset;
  for (Order& c : o.children) c = shifted(std::move(c), offset);
  return o;
}

// An 8-lane fma chain over [0, n) then hsum8: the CPU kernels' dot products and sums of squares.
Order cpu_lane_chain(const std::string& what, int64_t n) {
  std::vector<Order> steps;
  for (int64_t c = 0; c < n; c += kCpuLanes)
    steps.push_back(Order::atom("fma8", c, c + kCpuLanes, std::min<int64_t>(c + kCpuLanes, n)));
  return Order::chain("hsum8 of " + what, {Order::chain("fma8 lanes", std::move(steps))});
}

}  // namespace

Schedules real_schedules() {
  Schedules s;
  s.gemm_splits = [](int64_t, int64_t n, int64_t k, int splits_override) {
    return kernels::gemm_effective_splits(n, k, splits_override);
  };
  s.attention_plan = [](const kernels::AttentionStepShape& shape,
                        const kernels::AttentionForce& force) {
    return kernels::plan_attention(shape, force);
  };
  s.attention_split = [](const kernels::AttentionStepShape&, const kernels::AttentionPlan&) {
    return kernels::kAttentionTcSplit;
  };
  s.attention_tile = [](const kernels::AttentionStepShape&, const kernels::AttentionPlan&) {
    return kernels::kAttentionTcTile;
  };
  s.attention_split_origin = [](int32_t) { return 0; };
  s.tp_chunks = [](const ModelConfig& c, int32_t) { return tp_canonical_chunks(c); };
  s.gemm_sweep = [](int32_t lo, int32_t hi, int32_t granule) {
    return kernels::gemm_sweep_ms(lo, hi, granule);
  };
  return s;
}

// ---- GEMM ---------------------------------------------------------------------------------

Order describe_gemm_cuda(const Schedules& s, int64_t m, int64_t n, int64_t k, bool split_blocks,
                         int splits_override) {
  const int splits = s.gemm_splits(m, n, k, splits_override);
  check(splits >= 1 && k % splits == 0, "gemm describer: {} splits of k {}", splits, k);
  const int64_t ks = k / splits;
  std::vector<Order> parts;
  for (int z = 0; z < splits; ++z) {
    std::vector<Order> steps;
    for (int64_t c = z * ks; c < (z + 1) * ks; c += kMmaK)
      steps.push_back(
          Order::atom("mma.k16", c, c + kMmaK, std::min<int64_t>(c + kMmaK, (z + 1) * ks)));
    parts.push_back(Order::chain("split: mma accumulate from 0", std::move(steps)));
  }
  // Both placements run the same fold (gemm.cu: the MULTI block's res = res + acc and the last
  // block's v = p0 + p1 + …); the op names it once so that the placement is not part of it.
  (void)split_blocks;
  return Order::chain("+ bias", {Order::chain("splits left to right", std::move(parts))});
}

Order describe_gemm_cpu(int64_t k) {
  return cpu_lane_chain("x·w", k);
}

// ---- attention ----------------------------------------------------------------------------

kernels::AttentionStepShape AttentionStep::shape() const {
  kernels::AttentionStepShape s;
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.head_dim = head_dim;
  s.block_size = block_size;
  s.n_seqs = static_cast<int32_t>(seqs.size());
  int32_t longest = 0;
  for (const Seq& q : seqs) {
    s.n_tokens += q.n_query;
    longest = std::max(longest, q.first + q.n_query);
  }
  s.max_blocks = (longest + block_size - 1) / block_size + extra_blocks;
  return s;
}

Order describe_attention_tc(const Schedules& sch, const AttentionStep& step, int32_t seq, int32_t j,
                            DescribeStats* stats) {
  const kernels::AttentionStepShape shape = step.shape();
  const kernels::AttentionPlan plan = sch.attention_plan(shape, step.force);
  const int split = sch.attention_split(shape, plan);
  const int tile = sch.attention_tile(shape, plan);
  check(split > 0 && tile > 0 && split % tile == 0, "attention describer: split {} tile {}", split,
        tile);
  const AttentionStep::Seq& q = step.seqs[static_cast<size_t>(seq)];
  const int32_t p = q.first + j;  // the row's absolute position
  const int32_t origin = sch.attention_split_origin(q.first);

  // How far the row's tiles run: a decode warp runs its own row; a CTA kernel runs the segment
  // of its CTA's tq tokens that belong to this sequence to the segment's largest position
  // (attention_tc_common.cuh's segment_splits). CTAs take tokens [c·tq, c·tq + tq) of the step.
  int32_t max_pos = p;
  if (plan.kernel != kernels::AttentionKernel::kDecodeWarps && plan.tq > 1) {
    int32_t t = 0;  // the row's token index in the step
    for (int32_t i = 0; i < seq; ++i) t += step.seqs[static_cast<size_t>(i)].n_query;
    t += j;
    const int32_t cta_begin = t / plan.tq * plan.tq, cta_end = cta_begin + plan.tq;
    int32_t seq_begin = 0;
    for (int32_t i = 0; i < seq; ++i) seq_begin += step.seqs[static_cast<size_t>(i)].n_query;
    const int32_t seg_end = std::min(cta_end, seq_begin + q.n_query);
    max_pos = q.first + (seg_end - 1 - seq_begin);
  }

  // Split edges at origin + z·split for every integer z (the real grid: origin 0), from 0 to
  // max_pos; tiles from each split's edge. The row merges the splits that hold a position ≤ p.
  std::vector<Order> merged;
  int64_t first = origin % split;
  if (first > 0) first -= split;
  for (int64_t z0 = first; z0 <= max_pos; z0 += split) {
    if (z0 > p) {  // all masked: merged as (−inf, 0, 0), an identity — or not merged at all
      if (stats) ++stats->masked_splits_dropped;
      continue;
    }
    std::vector<Order> tiles;
    const int64_t z_end = std::min<int64_t>(z0 + split, int64_t{max_pos} + 1);
    for (int64_t t0 = z0; t0 < z_end; t0 += tile) {
      if (t0 + tile <= 0) continue;  // before position 0 (a grid not aligned to 0)
      if (t0 > p) {                  // masked: m unchanged, c = 1, l + 0, o · 1
        if (stats) ++stats->masked_tiles_dropped;
        continue;
      }
      tiles.push_back(Order::atom("tc-tile", std::max<int64_t>(t0, 0), t0 + tile,
                                  std::min<int64_t>(t0 + tile, p + 1)));
    }
    merged.push_back(Order::chain("online softmax from (-inf,0,0)", std::move(tiles)));
  }
  return Order::chain("merge_state ascending, / L", std::move(merged));
}

Order describe_attention_cpu(int32_t pos) {
  std::vector<Order> tiles;
  for (int32_t t0 = 0; t0 <= pos; t0 += kernels::cpu::kAttentionTile)
    tiles.push_back(Order::atom("cpu-tile", t0, t0 + kernels::cpu::kAttentionTile,
                                std::min(t0 + kernels::cpu::kAttentionTile, pos + 1)));
  return Order::chain("online softmax, / l", std::move(tiles));
}

// ---- row reductions and sampling ------------------------------------------------------------

Order describe_rmsnorm_cpu(int32_t dim) {
  return cpu_lane_chain("x²", dim);
}

Order describe_rmsnorm_cuda(int32_t dim) {
  // Thread i: the fma chain of x[d]² for d = i, i + 256, … (ascending d); then per warp a xor
  // butterfly (16 … 1), then the 8 warp sums as (s0+s4, s1+s5, s2+s6, s3+s7) pairwise.
  std::vector<Order> threads;
  for (int i = 0; i < kCudaNormThreads; ++i) {
    std::vector<Order> chain;
    for (int32_t d = i; d < dim; d += kCudaNormThreads)
      chain.push_back(Order::atom("fma", d, d + 1));
    threads.push_back(Order::chain("thread chain", std::move(chain)));
  }
  return Order::chain("warp xor butterflies 16..1, then warps 4,2,1",
                      {Order::tree("threads", std::move(threads))});
}

Order describe_sampler_sum(int32_t vocab) {
  return Order::exact("fixed-point masses, 128-bit integer sum", 0, vocab);
}

// ---- tensor parallelism -------------------------------------------------------------------

Order describe_tp_row_parallel(const Schedules& s, const ModelConfig& c, TpLayer layer,
                               int32_t degree, const std::function<Order(int64_t k)>& gemm) {
  const TpChunks chunks = s.tp_chunks(c, degree);
  const std::optional<TpPartition> part = tp_try_partition(c, degree, chunks);
  check(part.has_value(), "tp describer: degree {} is not allowed", degree);
  const int64_t k = layer == TpLayer::kO ? int64_t{c.n_heads} * c.head_dim : c.ffn_dim;
  const int32_t n_chunks = layer == TpLayer::kO ? chunks.o : chunks.ffn;
  const int64_t kc = k / n_chunks;
  // The partials in the order the all-gather lays them out: rank by rank, each rank's chunks
  // [b[r], b[r+1]); tp_tree_sum sums that list pairwise by index.
  const std::vector<int32_t>& b = layer == TpLayer::kO ? part->o : part->ffn;
  std::vector<Order> partials;
  for (int32_t r = 0; r < degree; ++r)
    for (int32_t ch = b[static_cast<size_t>(r)]; ch < b[static_cast<size_t>(r) + 1]; ++ch)
      partials.push_back(shifted(gemm(kc), ch * kc));
  return Order::tree("tp_tree_sum pairwise", std::move(partials));
}

}  // namespace detllm::reduction_order
