// The reduction-order analyzer's enumeration and report (checker.h).
#include "verify/reduction_order/checker.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "kernels/gemm_buckets.h"
#include "verify/reduction_order/smt.h"

namespace detllm::reduction_order {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

AnalyzedModel model(const char* name, int32_t vocab, int32_t dim, int32_t heads, int32_t kv,
                    int32_t head_dim, int32_t ffn) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.dim = dim;
  c.n_heads = heads;
  c.n_kv_heads = kv;
  c.head_dim = head_dim;
  c.ffn_dim = ffn;
  c.n_layers = 1;
  return {name, c};
}

// Records the first difference of a family: `what` names the element, the two contexts.
struct Comparer {
  FamilyResult& r;
  // ctx() names context B; called only on a difference.
  template <class Ctx>
  void compare(const Order& ref, const Order& got, const std::string& element,
               const std::string& ref_ctx, Ctx&& ctx) {
    ++r.contexts;
    if (!r.ok || ref == got) return;
    r.ok = false;
    r.counterexample =
        fmt::format("{}\n      context A: {}\n      context B: {}\n      first difference: {}",
                    element, ref_ctx, ctx(), first_difference(ref, got));
  }
};

// ---- GEMM ---------------------------------------------------------------------------------

struct GemmShape {
  std::string name;
  int64_t n, k;
};
std::vector<GemmShape> gemm_shapes(const ModelConfig& c) {
  return {{"qkv", c.q_dim() + 2 * c.kv_dim(), c.dim},
          {"o", c.dim, c.q_dim()},
          {"gate_up", 2 * int64_t{c.ffn_dim}, c.dim},
          {"down", c.dim, c.ffn_dim},
          {"lm_head", c.vocab_size, c.dim}};
}

FamilyResult check_gemm_cuda(const AnalyzerBounds& b, const Schedules& s) {
  FamilyResult r;
  r.family = "CUDA GEMM, own kernel (gemm.cu)";
  r.scope = fmt::format(
      "every m in 1..{} and both split placements, the 5 weight shapes of each model; "
      "split rule gemm_effective_splits",
      b.gemm_max_m);
  const auto t0 = Clock::now();
  Comparer cmp{r};
  for (const AnalyzedModel& am : analyzed_models())
    for (const GemmShape& g : gemm_shapes(am.config)) {
      ++r.elements;
      const Order ref = describe_gemm_cuda(s, 1, g.n, g.k, false);
      const std::string element =
          fmt::format("y[row, col] of {} {} (n {}, k {})", am.name, g.name, g.n, g.k);
      for (int32_t m = 1; m <= b.gemm_max_m && r.ok; ++m)
        for (bool split_blocks : {false, true})
          cmp.compare(ref, describe_gemm_cuda(s, m, g.n, g.k, split_blocks), element,
                      "m 1, splits in the block", [&] {
                        return fmt::format(
                            "m {}, {}", m,
                            split_blocks ? "a block per split" : "splits in the block");
                      });
    }
  r.seconds = seconds_since(t0);
  return r;
}

// cuBLASLt plans: their order cannot be read; what stands in is that each plan's bits are
// compared with the own kernel's at gemm_sweep_ms of its bucket. This checks the sweep reaches
// every launch grid: for each bucket (lo, hi] and tile granule g, every tile count ⌈m / g⌉ of
// the bucket has its first and its last m verified (rows of a partial tile are masked).
FamilyResult check_gemm_lt_sweep(const Schedules& s) {
  FamilyResult r;
  r.family = "cuBLASLt plans (gemm_lt, buckets)";
  r.scope =
      "every bucket up to kGemmMaxBucket, tile granules 1..256: the verification sweep "
      "(gemm_sweep_ms) hits the first and last m of every launch grid";
  const auto t0 = Clock::now();
  for (int32_t hi = 1; hi <= kernels::kGemmMaxBucket && r.ok; hi = kernels::gemm_bucket_above(hi)) {
    const int32_t lo = kernels::gemm_bucket_below(hi) + 1;
    for (int32_t g = 1; g <= 256 && r.ok; g *= 2) {
      ++r.elements;
      std::vector<int32_t> ms = s.gemm_sweep(lo, hi, g);
      std::sort(ms.begin(), ms.end());
      auto has = [&](int32_t m) { return std::binary_search(ms.begin(), ms.end(), m); };
      for (int32_t m = lo; m <= hi && r.ok; ++m) {
        ++r.contexts;
        const int32_t count = (m + g - 1) / g;
        const int32_t first = std::max(lo, (count - 1) * g + 1), last = std::min(hi, count * g);
        if (!has(first) || !has(last)) {
          r.ok = false;
          r.counterexample = fmt::format(
              "bucket ({}, {}], granule {}: m {} launches {} tiles, whose m {}..{} are not both "
              "verified",
              lo - 1, hi, g, m, count, first, last);
        }
      }
    }
  }
  r.seconds = seconds_since(t0);
  return r;
}

// ---- attention ----------------------------------------------------------------------------

std::string describe_ctx(const AttentionStep& st, int32_t seq, int32_t j) {
  std::string seqs;
  for (size_t i = 0; i < st.seqs.size() && i < 6; ++i)
    seqs += fmt::format("{}[{}+{}]", i ? " " : "", st.seqs[i].first, st.seqs[i].n_query);
  if (st.seqs.size() > 6) seqs += fmt::format(" …({} seqs)", st.seqs.size());
  return fmt::format(
      "step {} seqs: {}; row = seq {} query {}; block {} +{} table blocks; "
      "force kernel {} split {}; plan: {}",
      st.seqs.size(), seqs, seq, j, st.block_size, st.extra_blocks, st.force.kernel, st.force.split,
      kernels::describe(kernels::plan_attention(st.shape(), st.force)));
}

FamilyResult check_attention_tc(const AnalyzerBounds& b, const Schedules& s, DescribeStats& stats) {
  FamilyResult r;
  r.family = "tensor-core attention (every planner schedule)";
  r.scope = fmt::format(
      "row positions {{{}}}; decode batches {{{}}}, query chunks {{{}}} (the row first, middle, "
      "last), neighbours of {{{}}} positions; block sizes {{{}}}, table padding {{{}}}; every "
      "kernel the step can run forced, both split placements",
      fmt::join(b.positions, ","), fmt::join(b.decode_batches, ","),
      fmt::join(b.chunk_lengths, ","), fmt::join(b.neighbour_lengths, ","),
      fmt::join(b.block_sizes, ","), fmt::join(b.extra_blocks, ","));
  const auto t0 = Clock::now();
  Comparer cmp{r};
  for (const AnalyzedModel& am : analyzed_models()) {
    const ModelConfig& c = am.config;
    if (!kernels::attention_tc_supported(c.head_dim, c.n_heads / c.n_kv_heads)) continue;
    for (int32_t p : b.positions) {
      ++r.elements;
      AttentionStep base;
      base.n_heads = c.n_heads;
      base.n_kv_heads = c.n_kv_heads;
      base.head_dim = c.head_dim;
      base.block_size = b.block_sizes.front();
      base.seqs = {{p, 1}};
      const Order ref = describe_attention_tc(s, base, 0, 0, &stats);
      const std::string element =
          fmt::format("attention row at position {} of {} (heads {}/{}, head_dim {})", p, am.name,
                      c.n_heads, c.n_kv_heads, c.head_dim);
      const std::string ref_ctx = describe_ctx(base, 0, 0);
      // The steps holding the row: (step, row's seq, row's query index).
      struct Ctx {
        AttentionStep st;
        int32_t seq, j;
      };
      std::vector<Ctx> steps;
      for (int32_t batch : b.decode_batches)
        for (int32_t where : {0, 1}) {  // the row first or last in the batch
          AttentionStep st = base;
          st.seqs.clear();
          for (int32_t i = 0; i < batch - 1; ++i)
            st.seqs.push_back(
                {b.neighbour_lengths[static_cast<size_t>(i) % b.neighbour_lengths.size()], 1});
          const int32_t seq = where == 0 ? 0 : batch - 1;
          st.seqs.insert(st.seqs.begin() + seq, AttentionStep::Seq{p, 1});
          steps.push_back({st, seq, 0});
        }
      for (int32_t len : b.chunk_lengths)
        for (int32_t j : {0, len / 2, len - 1}) {  // the row's index in its chunk
          if (j > p) continue;
          for (int32_t with_neighbour : {0, 1}) {
            AttentionStep st = base;
            st.seqs = {{p - j, len}};
            int32_t seq = 0;
            if (with_neighbour) {  // a decode row of another sequence first (a mixed step)
              st.seqs.insert(st.seqs.begin(), AttentionStep::Seq{b.neighbour_lengths.back(), 1});
              seq = 1;
            }
            steps.push_back({st, seq, j});
          }
        }
      for (Ctx& x : steps)
        for (int32_t bs : b.block_sizes)
          for (int32_t extra : b.extra_blocks)
            for (int kernel = -1; kernel < kernels::kAttentionKernels; ++kernel)
              for (int split = -1; split <= 1; ++split) {
                if (!r.ok) break;
                x.st.block_size = bs;
                x.st.extra_blocks = extra;
                x.st.force = {kernel, split};
                if (kernel >= 0 && !kernels::attention_kernel_applies(
                                       static_cast<kernels::AttentionKernel>(kernel), x.st.shape()))
                  continue;
                cmp.compare(ref, describe_attention_tc(s, x.st, x.seq, x.j, &stats), element,
                            ref_ctx, [&] { return describe_ctx(x.st, x.seq, x.j); });
              }
    }
  }
  r.seconds = seconds_since(t0);
  return r;
}

// The families with no schedule argument: the order is a function of one size; they are listed
// with what they are a function of, and tied to bits by tests/reduction_order.
FamilyResult fixed_family(const char* family, const char* scope, int64_t elements) {
  FamilyResult r;
  r.family = family;
  r.scope = scope;
  r.elements = elements;
  r.fixed = true;
  return r;
}

// ---- tensor parallelism -------------------------------------------------------------------

FamilyResult check_tp(const AnalyzerBounds& b, const Schedules& s) {
  FamilyResult r;
  r.family = "tensor-parallel reduction (row-parallel o_proj, down_proj)";
  r.scope = fmt::format(
      "every degree 1..{} the partition allows; chunk rule tp_canonical_chunks, "
      "partition tp_try_partition, pairwise tree tp_tree_sum",
      b.tp_max_degree);
  const auto t0 = Clock::now();
  Comparer cmp{r};
  for (const AnalyzedModel& am : analyzed_models())
    for (TpLayer layer : {TpLayer::kO, TpLayer::kDown}) {
      const ModelConfig& c = am.config;
      ++r.elements;
      auto gemm = [&](int64_t k) { return describe_gemm_cuda(s, 1, c.dim, k, false); };
      const Order ref = describe_tp_row_parallel(s, c, layer, 1, gemm);
      const std::string element = fmt::format(
          "{} of {}", layer == TpLayer::kO ? "o_proj output" : "down_proj output", am.name);
      for (int32_t d = 2; d <= b.tp_max_degree && r.ok; ++d) {
        if (!tp_try_partition(c, d, s.tp_chunks(c, d))) continue;
        cmp.compare(ref, describe_tp_row_parallel(s, c, layer, d, gemm), element, "TP degree 1",
                    [&] { return fmt::format("TP degree {}", d); });
      }
    }
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace

std::vector<AnalyzedModel> analyzed_models() {
  return {model("SmolLM2-135M", 49152, 576, 9, 3, 64, 1536),
          model("Llama-3.1-8B", 128256, 4096, 32, 8, 128, 14336),
          model("Qwen3-0.6B", 151936, 1024, 16, 8, 128, 3072)};
}

AnalyzerBounds analyzer_ci_bounds() {
  AnalyzerBounds b;
  b.name = "ci";
  b.positions = {0, 63, 64, 255, 256, 300, 1100};
  b.decode_batches = {1, 2, 9, 64};
  b.chunk_lengths = {1, 7, 64, 300};
  b.neighbour_lengths = {5, 2100};
  b.block_sizes = {16, 32};
  b.extra_blocks = {0, 3};
  b.gemm_max_m = 64;
  b.tp_max_degree = 8;
  return b;
}

AnalyzerBounds analyzer_large_bounds() {
  AnalyzerBounds b;
  b.name = "large";
  b.positions = {0, 1, 15, 63, 64, 65, 255, 256, 257, 511, 1023, 1100, 4095, 4096, 8191, 16383};
  b.decode_batches = {1, 2, 3, 8, 9, 16, 33, 64, 128, 256};
  b.chunk_lengths = {1, 2, 3, 16, 64, 65, 300, 1024, 8192};
  b.neighbour_lengths = {5, 300, 2100, 16384};
  b.block_sizes = {8, 16, 32, 64};
  b.extra_blocks = {0, 1, 17};
  b.gemm_max_m = 512;
  b.tp_max_degree = 8;
  return b;
}

bool AnalyzerResult::ok() const {
  for (const FamilyResult& f : families)
    if (!f.ok) return false;
  return true;
}

AnalyzerResult run_reduction_order_analyzer(const AnalyzerBounds& bounds,
                                            const Schedules& schedules) {
  AnalyzerResult r;
  r.families.push_back(check_gemm_cuda(bounds, schedules));
  r.families.push_back(check_gemm_lt_sweep(schedules));
  r.families.push_back(check_attention_tc(bounds, schedules, r.stats));
  r.families.push_back(check_tp(bounds, schedules));
  r.families.push_back(fixed_family(
      "CPU matmul, attention, RMSNorm (kernels/cpu)",
      "no schedule argument: the order is a function of k (matmul), the position (attention, "
      "tiles of 32 from 0) and dim (RMSNorm) alone; rows, tiles and threads are not inputs",
      3));
  r.families.push_back(fixed_family(
      "CUDA RMSNorm (row_reduce.cuh)",
      "no schedule argument: 256 thread chains + butterflies for every row count and kernel", 1));
  r.families.push_back(fixed_family(
      "sampler sums over the vocabulary",
      "exact: fixed-point masses in 128-bit integers, any grouping is the same value", 1));
  if (bounds.smt)
    for (FamilyResult& f : run_smt_claims(schedules)) r.families.push_back(std::move(f));
  return r;
}

std::string format_analyzer_result(const AnalyzerBounds& bounds, const AnalyzerResult& r) {
  std::string s = fmt::format(
      "reduction orders ({} bound): the order of a fixed output element — which inputs are "
      "summed, grouped how, in which order, in absolute positions — compared across execution "
      "contexts, built with the kernels' own schedule functions\n",
      bounds.name);
  int64_t total = 0;
  double secs = 0;
  for (const FamilyResult& f : r.families) {
    const char* verdict = f.skipped ? "SKIPPED" : f.fixed ? "FIXED" : f.ok ? "PROVED" : "FAILED";
    if (f.fixed || f.skipped)
      s += fmt::format("  {} {}\n      {}\n", verdict, f.family, f.scope);
    else
      s += fmt::format("  {} {}: {} element{}, {} context{}, {:.2f} s\n      {}\n", verdict,
                       f.family, f.elements, f.elements == 1 ? "" : "s", f.contexts,
                       f.contexts == 1 ? "" : "s", f.seconds, f.scope);
    if (!f.ok) s += fmt::format("    counterexample: {}\n", f.counterexample);
    total += f.contexts;
    secs += f.seconds;
  }
  s += fmt::format("  total: {} orders compared, {:.2f} s\n", total, secs);
  s += fmt::format(
      "  assumed, not proved here:\n"
      "    - an atom (an mma.m16n8k16 k-step, a 64-position tensor-core tile, a CPU 8-lane step) "
      "runs the same instructions wherever it runs; the kernels' tests force every kernel and "
      "placement on one step and compare bits (test_cuda CudaAttentionTc*, CudaGemm*)\n"
      "    - a tile or split wholly past the row's position is an exact identity (masked scores "
      "give p = 0, c = 2^0 = 1; a split (-inf, 0, 0) merges as a no-op): {} tiles and {} "
      "splits of the contexts above rest on it\n"
      "    - the describers model each kernel's structure as its code states it (one merge "
      "function, ascending splits, tiles from 0); the bits tests of tests/reduction_order tie "
      "them to the CPU kernels and, on a GPU, to the CUDA GEMM and attention\n"
      "  not analyzable: the inside of a cuBLASLt kernel. What stands in: each plan's every "
      "output bit is compared with the own kernel's at the m of gemm_sweep_ms over its bucket "
      "before it serves (gemm_lt.cpp), and the sweep covers every launch grid (above)\n",
      r.stats.masked_tiles_dropped, r.stats.masked_splits_dropped);
  s += r.ok() ? "  no order depends on the batch, the query length, chunking, page layout, split "
                "placement or TP degree within these bounds\n"
              : "  a reduction order depends on the execution context: see the counterexample\n";
  return s;
}

}  // namespace detllm::reduction_order
