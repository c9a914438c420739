// The reduction-order analyzer (src/verify/reduction_order, docs/contract.md "What is proved"):
// the real schedules pass at the CI bound; every planted schedule dependency is rejected with a
// counterexample; z3 proves the grid claims and refutes the planted grids; and contexts the
// analyzer calls equal give equal bits on the CPU kernels (tests/cuda/
// cuda_reduction_order_test.cpp does the same for the CUDA GEMM and attention on a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm.h"
#include "kernels/gemm_splits.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "verify/reduction_order/checker.h"
#include "verify/reduction_order/smt.h"

namespace detllm::reduction_order {
namespace {

// ---- the order expression -------------------------------------------------------------------

TEST(ReductionOrderExpr, EqualityAndFirstDifference) {
  const Order a = Order::chain("merge", {Order::chain("split", {Order::atom("tile", 0, 64, 40)})});
  Order b = a;
  EXPECT_EQ(a, b);
  EXPECT_TRUE(first_difference(a, b).empty());
  b.children[0].children[0].valid_hi = 41;
  EXPECT_NE(a, b);
  const std::string d = first_difference(a, b);
  EXPECT_NE(d.find("valid<40"), std::string::npos) << d;
  EXPECT_NE(d.find("valid<41"), std::string::npos) << d;
  EXPECT_NE(d.find("child 0"), std::string::npos) << d;
}

TEST(ReductionOrderExpr, RunsOfAtomsPrintCompactly) {
  std::vector<Order> steps;
  for (int c = 0; c < 4096; c += 16) steps.push_back(Order::atom("mma.k16", c, c + 16));
  const std::string s = to_string(Order::chain("split", std::move(steps)));
  EXPECT_EQ(s, "chain split(atom mma.k16[0:4096:16])");
}

// ---- the real schedules at the CI bound -------------------------------------------------------

// The enumeration alone (no z3) must reject each planted schedule.
AnalyzerBounds enumeration_only() {
  AnalyzerBounds b = analyzer_ci_bounds();
  b.smt = false;
  return b;
}

TEST(ReductionOrderAnalyzer, RealSchedulesPassAtTheCiBound) {
  const AnalyzerBounds b = analyzer_ci_bounds();
  const AnalyzerResult r = run_reduction_order_analyzer(b, real_schedules());
  const std::string report = format_analyzer_result(b, r);
  std::printf("%s", report.c_str());
  EXPECT_TRUE(r.ok()) << report;
  int64_t attention_contexts = 0;
  for (const FamilyResult& f : r.families)
    if (f.family.find("tensor-core attention") != std::string::npos)
      attention_contexts = f.contexts;
  // Every kernel of the planner and both placements were reached (not a vacuous pass).
  EXPECT_GT(attention_contexts, 10000);
  EXPECT_GT(r.stats.masked_tiles_dropped, 0);
}

// Every kernel the planner chooses appears among the CI bound's steps: the enumeration reaches
// each schedule by the planner's own choice, not only when forced.
TEST(ReductionOrderAnalyzer, CiBoundReachesEveryChosenKernel) {
  const AnalyzerBounds b = analyzer_ci_bounds();
  bool seen[kernels::kAttentionKernels] = {};
  for (const AnalyzedModel& m : analyzed_models()) {
    AttentionStep st;
    st.n_heads = m.config.n_heads;
    st.n_kv_heads = m.config.n_kv_heads;
    st.head_dim = m.config.head_dim;
    for (int32_t batch : b.decode_batches)
      for (int32_t p : b.positions) {
        st.seqs.assign(static_cast<size_t>(batch), AttentionStep::Seq{p, 1});
        seen[static_cast<int>(kernels::plan_attention(st.shape()).kernel)] = true;
      }
    for (int32_t len : b.chunk_lengths) {
      st.seqs = {{0, len}};
      seen[static_cast<int>(kernels::plan_attention(st.shape()).kernel)] = true;
    }
  }
  // The 32-row streams are chosen from 6144 tokens: beyond the CI bound's chunks, forced there.
  for (int k = 0; k < kernels::kAttentionKernels; ++k) {
    if (k == static_cast<int>(kernels::AttentionKernel::kPackedStreams)) continue;
    EXPECT_TRUE(seen[k]) << kernels::attention_kernel_name(
        static_cast<kernels::AttentionKernel>(k));
  }
}

// A schedule change that keeps the order (every step a CTA per split) is accepted.
TEST(ReductionOrderAnalyzer, PlacementOnlyChangeIsAccepted) {
  Schedules s = real_schedules();
  s.attention_plan = [](const kernels::AttentionStepShape& shape,
                        const kernels::AttentionForce& f) {
    kernels::AttentionForce g = f;
    g.split = 1;
    return kernels::plan_attention(shape, g);
  };
  const AnalyzerResult r = run_reduction_order_analyzer(enumeration_only(), s);
  EXPECT_TRUE(r.ok()) << format_analyzer_result(enumeration_only(), r);
}

// ---- planted schedule dependencies: each must be rejected -----------------------------------

// The first failing family and its counterexample.
std::pair<std::string, std::string> first_failure(const Schedules& s) {
  const AnalyzerResult r = run_reduction_order_analyzer(enumeration_only(), s);
  for (const FamilyResult& f : r.families)
    if (!f.ok) return {f.family, f.counterexample};
  return {"", ""};
}

TEST(ReductionOrderMutants, GemmSplitCountChosenFromTheBatch) {
  Schedules s = real_schedules();
  s.gemm_splits = [](int64_t m, int64_t n, int64_t k, int o) {  // split-K for small batches
    return m <= 8 && k % 1024 == 0 ? 4 : kernels::gemm_effective_splits(n, k, o);
  };
  const auto [family, cx] = first_failure(s);
  EXPECT_NE(family.find("GEMM"), std::string::npos) << family;
  EXPECT_NE(cx.find("context B: m 9"), std::string::npos) << cx;
  std::printf("planted gemm split from m: %s\n    %s\n", family.c_str(), cx.c_str());
}

TEST(ReductionOrderMutants, AttentionSplitSizeChosenFromTheStep) {
  Schedules s = real_schedules();
  s.attention_split = [](const kernels::AttentionStepShape& shape, const kernels::AttentionPlan&) {
    return shape.n_seqs <= 4 ? 2 * kernels::kAttentionTcSplit : kernels::kAttentionTcSplit;
  };
  const auto [family, cx] = first_failure(s);
  EXPECT_NE(family.find("attention"), std::string::npos) << family;
  EXPECT_NE(cx.find("first difference"), std::string::npos) << cx;
  std::printf("planted split size from the step: %s\n    %s\n", family.c_str(), cx.c_str());
}

TEST(ReductionOrderMutants, AttentionSplitsCountedFromTheChunkStart) {
  Schedules s = real_schedules();
  s.attention_split_origin = [](int32_t chunk_start) { return chunk_start; };
  const auto [family, cx] = first_failure(s);
  EXPECT_NE(family.find("attention"), std::string::npos) << family;
  std::printf("planted split origin at the chunk: %s\n    %s\n", family.c_str(), cx.c_str());
}

TEST(ReductionOrderMutants, AttentionTileChosenFromTheKernel) {
  Schedules s = real_schedules();
  s.attention_tile = [](const kernels::AttentionStepShape&, const kernels::AttentionPlan& p) {
    return p.kernel == kernels::AttentionKernel::kWarpgroup ? 2 * kernels::kAttentionTcTile
                                                            : kernels::kAttentionTcTile;
  };
  const auto [family, cx] = first_failure(s);
  EXPECT_NE(family.find("attention"), std::string::npos) << family;
  EXPECT_NE(cx.find("warpgroup"), std::string::npos) << cx;
  std::printf("planted tile from the kernel: %s\n    %s\n", family.c_str(), cx.c_str());
}

TEST(ReductionOrderMutants, TpChunksFromTheDegree) {
  Schedules s = real_schedules();
  s.tp_chunks = [](const ModelConfig& c, int32_t degree) {  // a rank sums its own slice first
    TpChunks k = tp_canonical_chunks(c);
    if (degree > 1 && c.ffn_dim % (degree * 8) == 0) k.ffn = degree;
    return k;
  };
  const auto [family, cx] = first_failure(s);
  EXPECT_NE(family.find("tensor-parallel"), std::string::npos) << family;
  EXPECT_NE(cx.find("TP degree"), std::string::npos) << cx;
  std::printf("planted TP chunks from the degree: %s\n    %s\n", family.c_str(), cx.c_str());
}

TEST(ReductionOrderMutants, LtSweepSkipsTheLastRowsOfATile) {
  Schedules s = real_schedules();
  s.gemm_sweep = [](int32_t lo, int32_t hi,
                    int32_t g) {  // m ≡ 1 (mod g) only: partial tiles unverified
    std::vector<int32_t> ms = {lo, hi};
    for (int32_t m = lo; m <= hi; ++m)
      if (m <= 16 || m % g == 1) ms.push_back(m);
    std::sort(ms.begin(), ms.end());
    ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
    return ms;
  };
  const auto [family, cx] = first_failure(s);
  EXPECT_NE(family.find("cuBLASLt"), std::string::npos) << family;
  std::printf("planted sweep: %s\n    %s\n", family.c_str(), cx.c_str());
}

// ---- z3 ---------------------------------------------------------------------------------------

TEST(ReductionOrderSmt, RealGridProvedPlantedGridsRefuted) {
  if (!have_z3()) GTEST_SKIP() << "built without z3 (apt-get install libz3-dev, reconfigure)";
  const SmtClaim real = prove_attention_grid(kernels::kAttentionTcSplit, kernels::kAttentionTcTile);
  EXPECT_TRUE(real.ok) << real.counterexample;
  for (GridVariant v : {GridVariant::kSplitsFromChunkStart, GridVariant::kSplitSizeFromBatch}) {
    const SmtClaim c =
        prove_attention_grid(kernels::kAttentionTcSplit, kernels::kAttentionTcTile, v);
    EXPECT_FALSE(c.ok);
    EXPECT_NE(c.counterexample.find("row_position ="), std::string::npos) << c.counterexample;
    std::printf("planted grid %d: %s\n", static_cast<int>(v), c.counterexample.c_str());
  }
  // A split that is not whole tiles: a tile crosses a split edge.
  const SmtClaim ragged = prove_attention_grid(96, 64);
  EXPECT_FALSE(ragged.ok);
  std::printf("split 96, tile 64: %s\n", ragged.counterexample.c_str());
}

// ---- tied to bits: contexts the analyzer calls equal give equal bits (CPU kernels) ----------

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(ReductionOrderBits, CpuMatmulRowAloneAndInABatch) {
  const int64_t n = 40, k = 300;
  // The analyzer: no context enters the CPU order (one expression of k).
  ASSERT_EQ(describe_gemm_cpu(k), describe_gemm_cpu(k));
  const std::vector<float> w = random_floats(static_cast<size_t>(n * k), 1);
  const std::vector<float> x = random_floats(static_cast<size_t>(37 * k), 2);
  const kernels::WeightMatrix wm{w.data(), DType::kF32, n, k};
  const int32_t row = 23;
  ThreadPool one(1), three(3);
  std::vector<float> alone(static_cast<size_t>(n)), batch(static_cast<size_t>(37 * n));
  kernels::cpu::matmul(one, x.data() + row * k, 1, wm, nullptr, alone.data());
  kernels::cpu::matmul(three, x.data(), 37, wm, nullptr, batch.data());
  EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + row * n, sizeof(float) * n));
}

TEST(ReductionOrderBits, CpuRmsnormRowAloneAndInABatch) {
  const int32_t dim = 576;
  const std::vector<float> x = random_floats(static_cast<size_t>(5 * dim), 3);
  const std::vector<float> w = random_floats(static_cast<size_t>(dim), 4);
  ThreadPool one(1), two(2);
  std::vector<float> alone(static_cast<size_t>(dim)), batch(static_cast<size_t>(5 * dim));
  kernels::cpu::rmsnorm(one, x.data() + 3 * dim, w.data(), 1, dim, 1e-5f, alone.data());
  kernels::cpu::rmsnorm(two, x.data(), w.data(), 5, dim, 1e-5f, batch.data());
  EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + 3 * dim, sizeof(float) * dim));
}

// One KV history of `len` positions written into a cache of shuffled blocks; the attention row
// of position p computed (a) as a lone decode token and (b) inside a chunk of queries, after a
// neighbour sequence, with another block size's worth of table padding: the analyzer calls both
// contexts equal (describe_attention_cpu(p) has no context argument; and on the tensor-core
// grid the two steps' orders are compared below), so the bits must be equal.
TEST(ReductionOrderBits, CpuAttentionDecodeAndChunkAndPages) {
  const int32_t n_heads = 4, n_kv = 2, hd = 64, bs = 16, len = 300, p = 257;
  const int32_t n_blocks = 64;
  const float scale = 0.125f;
  std::vector<float> kpool(static_cast<size_t>(n_blocks) * bs * n_kv * hd, 0.0f);
  std::vector<float> vpool(kpool.size(), 0.0f);
  const std::vector<float> kh = random_floats(static_cast<size_t>(len) * n_kv * hd, 5);
  const std::vector<float> vh = random_floats(kh.size(), 6);
  const std::vector<float> q = random_floats(static_cast<size_t>(len) * n_heads * hd, 7);
  auto cache_with = [&](const std::vector<int32_t>& table) {
    for (int32_t pos = 0; pos < len; ++pos) {
      const int64_t slot = int64_t{table[static_cast<size_t>(pos / bs)]} * bs + pos % bs;
      std::copy_n(kh.begin() + int64_t{pos} * n_kv * hd, n_kv * hd,
                  kpool.begin() + slot * n_kv * hd);
      std::copy_n(vh.begin() + int64_t{pos} * n_kv * hd, n_kv * hd,
                  vpool.begin() + slot * n_kv * hd);
    }
    kernels::KvCacheLayer c;
    c.k = kpool.data();
    c.v = vpool.data();
    c.n_blocks = n_blocks;
    c.block_size = bs;
    c.n_kv_heads = n_kv;
    c.head_dim = hd;
    return c;
  };
  const int32_t need = (len + bs - 1) / bs;
  ThreadPool pool(2);

  // (a) decode: the row alone, blocks in order.
  std::vector<int32_t> table_a(static_cast<size_t>(need));
  std::iota(table_a.begin(), table_a.end(), 0);
  kernels::KvCacheLayer ca = cache_with(table_a);
  const int32_t pos_a[] = {p}, seq_a[] = {0}, slot_a[] = {0};
  kernels::StepBatch ba;
  ba.n_tokens = 1;
  ba.positions = pos_a;
  ba.seq_of_token = seq_a;
  ba.slots = slot_a;
  ba.n_seqs = 1;
  ba.max_blocks = need;
  ba.block_tables = table_a.data();
  std::vector<float> out_a(static_cast<size_t>(n_heads) * hd);
  kernels::cpu::attention(pool, q.data() + int64_t{p} * n_heads * hd, ca, ba, n_heads, scale,
                          out_a.data());
  const std::vector<float> decoded = out_a;

  // (b) a chunk of 20 queries [250, 270) of the same sequence (row 1 of the step's table), after
  // a neighbour decode token (row 0, a short sequence), blocks shuffled, the table padded.
  std::vector<int32_t> table_b(static_cast<size_t>(need));
  std::iota(table_b.begin(), table_b.end(), 8);
  std::shuffle(table_b.begin(), table_b.end(), std::mt19937(9));
  kernels::KvCacheLayer cb = cache_with(table_b);
  const int32_t width = need + 3;
  std::vector<int32_t> tables(static_cast<size_t>(2 * width), 0);
  tables[0] = 1;  // the neighbour: 5 positions in block 1 (history zeros: its values do not matter)
  std::copy(table_b.begin(), table_b.end(), tables.begin() + width);
  const int32_t first = 250, chunk = 20;
  std::vector<int32_t> pos_b = {4}, seq_b = {0}, slot_b = {0};
  for (int32_t i = 0; i < chunk; ++i) {
    pos_b.push_back(first + i);
    seq_b.push_back(1);
    slot_b.push_back(0);
  }
  std::vector<float> qb(static_cast<size_t>(chunk + 1) * n_heads * hd, 0.0f);
  std::copy_n(q.begin() + int64_t{first} * n_heads * hd, int64_t{chunk} * n_heads * hd,
              qb.begin() + n_heads * hd);
  kernels::StepBatch bb;
  bb.n_tokens = chunk + 1;
  bb.positions = pos_b.data();
  bb.seq_of_token = seq_b.data();
  bb.slots = slot_b.data();
  bb.n_seqs = 2;
  bb.max_blocks = width;
  bb.block_tables = tables.data();
  std::vector<float> out_b(qb.size());
  kernels::cpu::attention(pool, qb.data(), cb, bb, n_heads, scale, out_b.data());

  // The analyzer on the tensor-core grid: the same two steps, the same order for the row.
  AttentionStep sa;
  sa.n_heads = n_heads;
  sa.n_kv_heads = n_kv;
  sa.head_dim = hd;
  sa.block_size = bs;
  sa.seqs = {{p, 1}};
  AttentionStep sb = sa;
  sb.seqs = {{4, 1}, {first, chunk}};
  sb.extra_blocks = 3;
  ASSERT_EQ(describe_attention_tc(real_schedules(), sa, 0, 0),
            describe_attention_tc(real_schedules(), sb, 1, p - first));
  const float* row_b = out_b.data() + int64_t{1 + p - first} * n_heads * hd;
  EXPECT_EQ(0, std::memcmp(decoded.data(), row_b, sizeof(float) * n_heads * hd));
}

// Every row of a 300-token prompt computed in chunks of 1, 7 and 64 beside another sequence's
// decode rows, on shuffled pages and 1 or 3 threads, against the whole prompt in one step: for
// each row the analyzer calls the two contexts' tensor-core orders equal (the CPU kernel's own
// order has no context argument), and the CPU kernel's bits are equal.
TEST(ReductionOrderBits, CpuAttentionEveryRowOfChunkedPrompts) {
  using kernels::testing::AttnShape;
  using kernels::testing::Chunk;
  using kernels::testing::PagedWorld;
  const AttnShape shape{9, 3, 64, 16};
  const int len = 300;
  const Schedules real = real_schedules();
  auto one = kernels::make_cpu_ops(1);
  PagedWorld base(*one, shape, {42}, {len}, 0);
  base.step({{0, 0, len}});
  AttentionStep whole;
  whole.n_heads = shape.n_heads;
  whole.n_kv_heads = shape.n_kv_heads;
  whole.head_dim = shape.head_dim;
  whole.block_size = shape.block_size;
  whole.seqs = {{0, len}};
  for (int chunk : {1, 7, 64}) {
    SCOPED_TRACE(::testing::Message() << "chunks of " << chunk);
    auto ops = kernels::make_cpu_ops(chunk == 7 ? 3 : 1);
    PagedWorld w(*ops, shape, {42, 7}, {len, 40}, 5 + chunk);
    int other = 0;
    for (int start = 0; start < len; start += chunk) {
      std::vector<Chunk> step = {{0, start, std::min(chunk, len - start)}};
      if (other < 40) step.push_back({1, other++, 1});
      w.step(step);
      AttentionStep st = whole;
      st.seqs = {{start, step[0].count}};
      if (step.size() > 1) st.seqs.push_back({step[1].start, 1});
      for (int j = 0; j < step[0].count; ++j) {
        const int p = start + j;
        ASSERT_EQ(describe_attention_tc(real, whole, 0, p), describe_attention_tc(real, st, 0, j))
            << "position " << p;
        ASSERT_EQ(kernels::testing::first_bit_difference(base.output(0, p).data(),
                                                         w.output(0, p).data(), base.row_floats()),
                  -1)
            << "position " << p;
      }
    }
  }
}

}  // namespace
}  // namespace detllm::reduction_order
