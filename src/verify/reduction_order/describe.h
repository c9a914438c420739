// One describer per kernel family of the invariant path: the reduction order (order.h) of one
// output element in one execution context, built by calling the very host functions the
// kernels choose their schedules with (Schedules: the GEMM split rule, the attention planner
// and its split/tile grid, the TP chunk rule). The checker (checker.h) compares the order of a
// fixed element across contexts; a planted schedule (a Schedules with one function replaced,
// tests/reduction_order) must be rejected.
//
// What each describer models is the kernel's structure as its code and comments state it
// (e.g. attention_tc_common.cuh: tiles of kKvTile aligned to 0, splits of kTcSplit from
// (−inf, 0, 0), merged in ascending order by merge_state/merge_value in every placement); what
// varies with the context — the split count, the split size and origin, which rows share a
// CTA and so how far past the row's position its tiles run, the placement — is taken from the
// schedule functions. The inside of an atom (an mma k-step, a 64-position tile, a cuBLASLt
// kernel) is not analyzed; docs/contract.md names the evidence that stands in there.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/attention_plan.h"
#include "model/config.h"
#include "model/tensor_parallel.h"
#include "verify/reduction_order/order.h"

namespace detllm::reduction_order {

// The schedule choices, as functions. real_schedules() is the production code's; a planted
// dependency replaces one.
struct Schedules {
  // The CUDA GEMM's K splits of an (m × n × k) GEMM. Real: kernels::gemm_effective_splits(n,
  // k, override) — m is not an argument of the real rule.
  std::function<int(int64_t m, int64_t n, int64_t k, int splits_override)> gemm_splits;
  // The tensor-core attention's plan of a step. Real: kernels::plan_attention.
  std::function<kernels::AttentionPlan(const kernels::AttentionStepShape&,
                                       const kernels::AttentionForce&)>
      attention_plan;
  // Its reduction grid for a plan: the split size and the tile size in positions, and the
  // absolute position the splits are counted from for a row whose step starts its query chunk
  // at `chunk_start`. Real: kAttentionTcSplit, kAttentionTcTile (the kernels' kTcSplit and
  // kKvTile, attention_tc_grid.h), origin 0.
  std::function<int(const kernels::AttentionStepShape&, const kernels::AttentionPlan&)>
      attention_split;
  std::function<int(const kernels::AttentionStepShape&, const kernels::AttentionPlan&)>
      attention_tile;
  std::function<int32_t(int32_t chunk_start)> attention_split_origin;
  // The canonical TP chunk counts of a model at a degree. Real: tp_canonical_chunks(config)
  // (the degree is not an argument of the real rule).
  std::function<TpChunks(const ModelConfig&, int32_t degree)> tp_chunks;
  // The m at which a cuBLASLt plan of bucket [lo, hi] is verified, for tiles of `granule` rows.
  // Real: kernels::gemm_sweep_ms.
  std::function<std::vector<int32_t>(int32_t lo, int32_t hi, int32_t granule)> gemm_sweep;
};
Schedules real_schedules();

// Counts of what the orders rest on, summed over the describers' calls.
struct DescribeStats {
  int64_t masked_tiles_dropped = 0;   // tiles wholly past the row's position (identity steps)
  int64_t masked_splits_dropped = 0;  // splits wholly past it, merged as (−inf, 0, 0)
};

// ---- GEMM ---------------------------------------------------------------------------------
// y[row, j] of the CUDA invariant kernel (kernels/cuda/gemm.cu) for an m-row GEMM of weight
// (n, k): S = gemm_splits splits of k / S, each a chain of mma.m16n8k16 k-steps ascending from
// zero; the splits merged left to right (in the block when `split_blocks` is false, by the last
// block of the tile when true — both placements fold p0 + p1 + … in order), then + bias.
Order describe_gemm_cuda(const Schedules& s, int64_t m, int64_t n, int64_t k, bool split_blocks,
                         int splits_override = 0);
// y[row, j] of the CPU matmul (kernels/cpu/matmul.cpp): one 8-lane fma chain over k in 8-wide
// steps (a zero-padded tail), then the hsum8 tree, + bias. No schedule input: the row tile,
// the column tile and the thread partition are not arguments of the order.
Order describe_gemm_cpu(int64_t k);

// ---- attention ----------------------------------------------------------------------------
// A step of the tensor-core attention: its heads and block size, and its sequences' query
// chunks (positions [first, first + n_query) of a sequence whose KV ends with the chunk).
struct AttentionStep {
  int32_t n_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 16;
  struct Seq {
    int32_t first = 0, n_query = 1;
  };
  std::vector<Seq> seqs;
  int32_t extra_blocks = 0;  // the block table's width past the longest row (a padded table)
  kernels::AttentionForce force;
  kernels::AttentionStepShape shape() const;
};
// The attention row of (seqs[seq], query j of its chunk), one query head: its KV positions
// 0 … p in tiles and splits, merged in ascending split order. CTA kernels run a segment of
// the CTA's rows of one sequence to the segment's largest position: tiles past p are masked
// (identity steps, counted in stats), splits past p are not merged.
Order describe_attention_tc(const Schedules& s, const AttentionStep& step, int32_t seq, int32_t j,
                            DescribeStats* stats = nullptr);
// The CPU attention row at position p (kernels/cpu/attention.cpp): tiles of kAttentionTile
// aligned to 0, an online-softmax chain, no splits. No schedule input.
Order describe_attention_cpu(int32_t pos);

// ---- row reductions and sampling ------------------------------------------------------------
// RMSNorm's sum of squares: CPU (8-lane fma chain over dim, hsum8) and CUDA (row_reduce.cuh:
// 256 thread chains over d ≡ i mod 256, then xor butterflies in each warp and over the warps).
Order describe_rmsnorm_cpu(int32_t dim);
Order describe_rmsnorm_cuda(int32_t dim);
// The sampler's sums over the vocabulary (kernels/sampling/sampler_math.h): exact fixed-point
// masses summed as 128-bit integers, so any grouping (threads, blocks) is the same value.
Order describe_sampler_sum(int32_t vocab);

// ---- tensor parallelism -------------------------------------------------------------------
// One output of a row-parallel layer (o_proj: K = n_heads · head_dim; down_proj: K = ffn_dim)
// at TP degree `degree`: its C canonical chunks' GEMM partials (each the GEMM order over its K
// range, from `gemm`), summed in tp_tree_sum's pairwise tree over chunk index. Throws when the
// degree is not allowed for the config.
enum class TpLayer : int8_t { kO, kDown };
Order describe_tp_row_parallel(const Schedules& s, const ModelConfig& c, TpLayer layer,
                               int32_t degree, const std::function<Order(int64_t k)>& gemm);

}  // namespace detllm::reduction_order
