// The mixture-of-experts ops on the GPU (kernels/cuda/moe.cu, docs/cuda.md "Mixture of
// experts"): routing, the combine and the bf16 row gather against the plain reference
// (kernels/ref/moe_ref.h) bit for bit — random logits, exact ties, NaN and infinite logits,
// k = 1 and k = n_experts, 8…256 experts; the grouped GEMM's rows equal to each row run alone
// at every group size (empty groups, groups of 1 and of many rows, m = 1…300 mixed), in
// invariant mode; the fast path runs and matches within a tolerance; the transformers
// fixtures of every MoE architecture (Qwen3-MoE with and without router ties, Mixtral,
// Qwen2-MoE's shared expert, OLMoE) close to transformers' logits on the GPU, prefill = one
// token at a time bit for bit; and two negative
// controls the same checks must catch: a grouped GEMM whose K split depends on the group's
// size, and a routing warp that breaks ties by arrival order (moe_negative_control.cu).
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaMoe*' (skips without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "cuda/cuda_test_util.h"
#include "cuda/moe_negative_control.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/ref/moe_ref.h"
#include "model/llama_model.h"
#include "model/model_loader.h"
#include "model/solo_runner.h"

namespace detllm::kernels {
namespace {

using cuda_testing::DeviceArray;

// Equal bits, or both NaN (a NaN's payload is the hardware's: x86 and the GPU make different
// default NaNs, and no weight of a NaN row means anything).
bool same_or_both_nan(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

// Logits with many exact ties (a few levels), NaN and ±inf sprinkled in when `specials`.
std::vector<float> route_logits(uint32_t seed, int32_t n, int32_t n_experts, bool specials) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> level(0, 5), pick(0, 99);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n) * n_experts);
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 3 == 0 ? normal(rng) : 0.5f * level(rng);
  if (specials) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    for (float& x : v) {
      const int p = pick(rng);
      if (p < 3) x = nan;
      else if (p < 4) x = -nan;
      else if (p < 6) x = -inf;
    }
    // Whole rows of one kind: all NaN, all -inf, one +inf, all equal.
    if (n >= 4) {
      for (int32_t j = 0; j < n_experts; ++j) {
        v[j] = nan;
        v[static_cast<size_t>(n_experts) + j] = -inf;
        v[2 * static_cast<size_t>(n_experts) + j] = 1.25f;
      }
      v[3 * static_cast<size_t>(n_experts) + n_experts / 2] = inf;
    }
  }
  return v;
}

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed route_ref(const std::vector<float>& logits, int32_t n, int32_t n_experts, int32_t k,
                 bool renormalize) {
  Routed r{std::vector<int32_t>(static_cast<size_t>(n) * k),
           std::vector<float>(static_cast<size_t>(n) * k)};
  ref::moe_route(logits.data(), n, n_experts, k, renormalize, r.experts.data(), r.weights.data());
  return r;
}

// Rows whose routing differs from the reference's (ids, or weight bits unless both NaN).
int32_t rows_differing(const Routed& got, const Routed& want, int32_t n, int32_t k) {
  int32_t bad = 0;
  for (int32_t t = 0; t < n; ++t) {
    bool same = true;
    for (int32_t r = 0; r < k; ++r) {
      const size_t i = static_cast<size_t>(t) * k + r;
      same = same && got.experts[i] == want.experts[i] &&
             same_or_both_nan(got.weights[i], want.weights[i]);
    }
    bad += same ? 0 : 1;
  }
  return bad;
}

TEST(CudaMoe, RouteGivesTheReferenceBits) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  int cases = 0;
  for (int32_t n_experts : {1, 8, 16, 33, 60, 64, 128, 256}) {
    for (int32_t k : {1, 2, 4, 8, n_experts}) {
      if (k > n_experts) continue;
      for (bool renorm : {false, true}) {
        for (bool specials : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "experts " << n_experts << " k " << k
                                            << " renormalize " << renorm << " specials "
                                            << specials);
          const int32_t n = 67;
          const auto logits = route_logits(static_cast<uint32_t>(n_experts * 131 + k * 7 + renorm),
                                           n, n_experts, specials);
          const Routed want = route_ref(logits, n, n_experts, k, renorm);
          DeviceArray<float> dl(*ops, logits), dw(*ops, want.weights.size());
          DeviceArray<int32_t> de(*ops, want.experts.size());
          ops->moe_route(dl.data(), n, n_experts, k, renorm, de.data(), dw.data());
          const Routed got{de.download(), dw.download()};
          EXPECT_EQ(rows_differing(got, want, n, k), 0);
          ++cases;
        }
      }
    }
  }
  std::printf("  [moe route] %d cases of 67 rows: ids and weight bits = the reference\n", cases);
}

// A row's routing does not depend on the batch: one row alone = the same row among 300.
TEST(CudaMoe, RouteOfARowAloneEqualsItInABatch) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  const int32_t n = 300, n_experts = 128, k = 8;
  const auto logits = route_logits(7, n, n_experts, false);
  DeviceArray<float> dl(*ops, logits), dw(*ops, size_t{n} * k), dw1(*ops, k);
  DeviceArray<int32_t> de(*ops, size_t{n} * k), de1(*ops, k);
  ops->moe_route(dl.data(), n, n_experts, k, true, de.data(), dw.data());
  const auto all_e = de.download();
  const auto all_w = dw.download();
  for (int32_t t : {0, 1, 150, 299}) {
    ops->moe_route(dl.data() + int64_t{t} * n_experts, 1, n_experts, k, true, de1.data(),
                   dw1.data());
    const auto e1 = de1.download();
    const auto w1 = dw1.download();
    for (int32_t r = 0; r < k; ++r) {
      EXPECT_EQ(e1[r], all_e[t * k + r]) << "row " << t;
      EXPECT_TRUE(same_or_both_nan(w1[r], all_w[t * k + r])) << "row " << t;
    }
  }
}

TEST(CudaMoe, NegativeControlArrivalTiesAreCaught) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  const int32_t n = 67, n_experts = 16, k = 4;
  const auto logits = route_logits(11, n, n_experts, false);
  const Routed want = route_ref(logits, n, n_experts, k, true);
  DeviceArray<float> dl(*ops, logits), dw(*ops, want.weights.size());
  DeviceArray<int32_t> de(*ops, want.experts.size());
  ops->synchronize();
  ASSERT_EQ(cuda_testing::launch_arrival_tie_route(dl.data(), n, n_experts, k, true, de.data(),
                                                   dw.data()),
            cudaSuccess);
  const Routed got{de.download(), dw.download()};
  const int32_t bad = rows_differing(got, want, n, k);
  std::printf("  [moe route control] ties by arrival order: %d of %d rows differ\n", bad, n);
  EXPECT_GT(bad, 0) << "the control matched the reference: the routing check cannot fail";
}

TEST(CudaMoe, CombineGivesTheReferenceBits) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  for (int32_t k : {1, 4, 8}) {
    for (int32_t dim : {8, 64, 2048, 100}) {
      for (bool with_shared : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "k " << k << " dim " << dim << " shared " << with_shared);
        const int32_t n = 37, nk = n * k;
        std::vector<int32_t> rows(static_cast<size_t>(nk));
        std::iota(rows.begin(), rows.end(), 0);
        std::shuffle(rows.begin(), rows.end(), std::mt19937(static_cast<uint32_t>(k + dim)));
        const auto y = cuda_testing::random_floats(static_cast<size_t>(nk) * dim, 3 + k, -4.0f, 4.0f);
        auto w = cuda_testing::random_floats(static_cast<size_t>(nk), 5 + k, 0.0f, 1.0f);
        w[0] = 0.0f;  // a zero weight times a negative value: -0 added to +0
        const auto shared = cuda_testing::random_floats(size_t{n} * dim, 9, -2.0f, 2.0f);
        auto gate = cuda_testing::random_floats(size_t{n}, 13, -30.0f, 30.0f);
        gate[1] = 0.0f;
        gate[2] = -0.0f;
        gate[3] = 800.0f;
        gate[4] = -800.0f;
        std::vector<float> want(size_t{n} * dim);
        ref::moe_combine(y.data(), rows.data(), w.data(), n, k, dim,
                         with_shared ? shared.data() : nullptr, gate.data(), want.data());
        DeviceArray<float> dy(*ops, y), dw(*ops, w), ds(*ops, shared), dg(*ops, gate),
            out(*ops, want.size());
        DeviceArray<int32_t> dr(*ops, rows);
        ops->moe_combine(dy.data(), dr.data(), dw.data(), n, k, dim,
                         with_shared ? ds.data() : nullptr, with_shared ? dg.data() : nullptr,
                         out.data());
        const auto got = out.download();
        EXPECT_BITS_EQ(got.data(), want.data(), static_cast<int64_t>(want.size()));
      }
    }
  }
}

TEST(CudaMoe, GatherRowsRoundedCopiesBf16Rows) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  ASSERT_EQ(ops->gemm_input_dtype(), DType::kBF16);
  for (int32_t dim : {2048, 64, 36, 7}) {
    const int32_t src_rows = 50, n_rows = 123;
    const auto x = cuda_testing::to_bf16(cuda_testing::random_floats(size_t{src_rows} * dim, 21));
    std::vector<int32_t> rows(n_rows);
    std::mt19937 rng(static_cast<uint32_t>(dim));
    for (int32_t& r : rows) r = static_cast<int32_t>(rng() % src_rows);
    DeviceArray<uint16_t> dx(*ops, x), out(*ops, size_t{n_rows} * dim);
    DeviceArray<int32_t> dr(*ops, rows);
    ops->gather_rows_rounded(dx.data(), dim, dr.data(), n_rows, out.data());
    const auto got = out.download();
    for (int32_t r = 0; r < n_rows; ++r) {
      ASSERT_EQ(0, std::memcmp(got.data() + static_cast<size_t>(r) * dim,
                               x.data() + static_cast<size_t>(rows[r]) * dim,
                               sizeof(uint16_t) * dim))
          << "dim " << dim << " row " << r;
    }
  }
}

// Device grouping = the host counting sort (Ops::moe_group's default), chunk edges included.
TEST(CudaMoe, GroupGivesTheHostCountingSort) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  auto cpu = make_cpu_ops(1);
  for (int32_t n_experts : {1, 8, 64, 128, 1024}) {
    for (auto [n, k] : {std::pair<int32_t, int32_t>{1, 1}, {7, 4}, {300, 8}, {2048, 8}, {513, 8}}) {
      if (k > n_experts) continue;
      SCOPED_TRACE(::testing::Message() << "experts " << n_experts << " n " << n << " k " << k);
      std::mt19937 rng(static_cast<uint32_t>(n_experts * 7 + n));
      std::vector<int32_t> experts(static_cast<size_t>(n) * k);
      // Skewed: half the pairs on the first 4 experts (large groups), the rest anywhere.
      for (size_t i = 0; i < experts.size(); ++i)
        experts[i] = static_cast<int32_t>(rng() % (i % 2 == 0 ? std::min(4, n_experts) : n_experts));
      std::vector<int32_t> offsets(static_cast<size_t>(n_experts) + 1), src(experts.size()),
          rows(experts.size());
      cpu->moe_group(experts.data(), n, k, n_experts, offsets.data(), src.data(), rows.data());
      DeviceArray<int32_t> de(*ops, experts), doff(*ops, offsets.size()), dsrc(*ops, src.size()),
          drows(*ops, rows.size());
      ops->moe_group(de.data(), n, k, n_experts, doff.data(), dsrc.data(), drows.data());
      EXPECT_EQ(doff.download(), offsets);
      EXPECT_EQ(dsrc.download(), src);
      EXPECT_EQ(drows.download(), rows);
    }
  }
}

// Group sizes for the grouped GEMM: empty groups, 1, and many, around the tile and bucket
// edges, summing to a few thousand rows (m = 1…300 mixed).
std::vector<int32_t> group_sizes() {
  std::vector<int32_t> s = {0,  1,   2,   3,   5,   7,   8,   9,   15,  16,  17,  31,  32,
                            33, 63,  64,  65,  100, 127, 128, 129, 160, 161, 192, 200, 255,
                            256, 257, 299, 300, 0,  1,   4,   12,  48,  96};
  std::shuffle(s.begin(), s.end(), std::mt19937(2026));
  return s;
}

struct GroupedCase {
  std::vector<int32_t> offsets;
  std::vector<DeviceArray<uint16_t>> weights;  // one per group
  std::vector<WeightMatrix> w;
  int64_t n = 0, kdim = 0;
};

GroupedCase grouped_case(Ops& ops, int64_t n, int64_t kdim) {
  GroupedCase c;
  c.n = n;
  c.kdim = kdim;
  const auto sizes = group_sizes();
  c.offsets.push_back(0);
  for (int32_t s : sizes) c.offsets.push_back(c.offsets.back() + s);
  c.weights.reserve(sizes.size());
  for (size_t g = 0; g < sizes.size(); ++g) {
    c.weights.emplace_back(ops, cuda_testing::to_bf16(cuda_testing::fast_random_floats(
                                    static_cast<size_t>(n * kdim), 100 + g, -0.05f, 0.05f)));
    c.w.push_back({c.weights.back().data(), DType::kBF16, n, kdim});
  }
  return c;
}

// Rows of group g whose bits differ from the same row run alone (m = 1) through matmul_rounded.
int64_t rows_unlike_alone(Ops& ops, const GroupedCase& c, const DeviceArray<uint16_t>& x,
                          const std::vector<float>& y) {
  DeviceArray<float> one(ops, static_cast<size_t>(c.n));
  int64_t bad = 0;
  for (size_t g = 0; g + 1 < c.offsets.size(); ++g) {
    for (int32_t r = c.offsets[g]; r < c.offsets[g + 1]; ++r) {
      ops.matmul_rounded(x.data() + int64_t{r} * c.kdim, 1, c.w[g], nullptr, one.data(), c.n);
      const auto alone = one.download();
      if (std::memcmp(alone.data(), y.data() + int64_t{r} * c.n, sizeof(float) * c.n) != 0) ++bad;
    }
  }
  return bad;
}

// Every row of the grouped GEMM has the bits of the row alone, whatever its group's size, on
// the Qwen3-30B-A3B expert shapes (gate+up fused 1536×2048, down 2048×768) and a ragged one
// (K = 72: a last k-step half past K); and the one-launch kernel on device offsets
// (matmul_grouped_device, moe_grouped.cu) gives the same bits.
TEST(CudaMoe, GroupedGemmRowsEqualTheRowAloneAtEveryGroupSize) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  for (auto [n, kdim] : {std::pair<int64_t, int64_t>{1536, 2048}, {2048, 768}, {40, 72}}) {
    SCOPED_TRACE(::testing::Message() << "N " << n << " K " << kdim);
    const GroupedCase c = grouped_case(*ops, n, kdim);
    const int32_t m = c.offsets.back();
    DeviceArray<uint16_t> x(*ops, cuda_testing::to_bf16(cuda_testing::fast_random_floats(
                                      static_cast<size_t>(m * kdim), 7, -1.0f, 1.0f)));
    DeviceArray<float> y(*ops, static_cast<size_t>(m * n));
    ops->matmul_grouped(x.data(), c.offsets.data(), static_cast<int32_t>(c.w.size()), c.w.data(),
                        y.data(), n);
    const auto got = y.download();
    const int64_t bad = rows_unlike_alone(*ops, c, x, got);
    std::printf("  [moe grouped gemm] N %lld K %lld: %d rows in %zu groups, %lld unlike alone\n",
                static_cast<long long>(n), static_cast<long long>(kdim), m, c.w.size(),
                static_cast<long long>(bad));
    EXPECT_EQ(bad, 0);
    // The one-launch grouped kernel on device offsets: the same bits, with a loose row bound.
    DeviceArray<int32_t> offsets(*ops, c.offsets);
    DeviceArray<float> y2(*ops, static_cast<size_t>(m * n));
    ops->matmul_grouped_device(x.data(), offsets.data(), static_cast<int32_t>(c.w.size()), m + 40,
                               c.w.data(), y2.data(), n);
    const auto got2 = y2.download();
    EXPECT_BITS_EQ(got2.data(), got.data(), static_cast<int64_t>(got.size()));
  }
}

// The negative control: groups of more than one row run with two K splits merged (what a
// grouped GEMM that picks another split for a larger group would do). The same check fails.
// K is a multiple of two split alignments (512), else the kernel ignores the override.
TEST(CudaMoe, NegativeControlGroupSizeDependentSplitIsCaught) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  CudaOptions split;
  split.gemm_splits_override = 2;
  auto split_ops = make_cuda_ops(split);
  const int64_t n = 1536, kdim = 2048;
  ASSERT_EQ(cuda::gemm_effective_splits(n, kdim, split.gemm_splits_override), 2)
      << "the control's shape must actually split";
  const GroupedCase c = grouped_case(*ops, n, kdim);
  const int32_t m = c.offsets.back();
  DeviceArray<uint16_t> x(*ops, cuda_testing::to_bf16(cuda_testing::fast_random_floats(
                                    static_cast<size_t>(m * kdim), 7, -1.0f, 1.0f)));
  DeviceArray<float> y(*ops, static_cast<size_t>(m * n));
  ops->synchronize();
  for (size_t g = 0; g + 1 < c.offsets.size(); ++g) {
    const int32_t rows = c.offsets[g + 1] - c.offsets[g];
    if (rows == 0) continue;
    Ops& o = rows > 1 ? *split_ops : *ops;
    o.matmul_rounded(x.data() + int64_t{c.offsets[g]} * kdim, rows, c.w[g], nullptr,
                     y.data() + int64_t{c.offsets[g]} * n, n);
    o.synchronize();
  }
  const auto got = y.download();
  const int64_t bad = rows_unlike_alone(*ops, c, x, got);
  std::printf("  [moe grouped gemm control] K split by group size: %lld of %d rows differ\n",
              static_cast<long long>(bad), m);
  EXPECT_GT(bad, 0) << "the control matched: the grouped GEMM check cannot fail";
}

// The fast numerics (default cuBLAS per expert) runs the same groups, close to invariant.
TEST(CudaMoe, FastGroupedGemmIsCloseToInvariant) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  auto fast = cuda_testing::fast_ops();
  const int64_t n = 1536, kdim = 2048;
  const GroupedCase c = grouped_case(*ops, n, kdim);
  const int32_t m = c.offsets.back();
  DeviceArray<uint16_t> x(*ops, cuda_testing::to_bf16(cuda_testing::fast_random_floats(
                                    static_cast<size_t>(m * kdim), 7, -1.0f, 1.0f)));
  DeviceArray<float> yi(*ops, static_cast<size_t>(m * n)), yf(*ops, static_cast<size_t>(m * n));
  ops->matmul_grouped(x.data(), c.offsets.data(), static_cast<int32_t>(c.w.size()), c.w.data(),
                      yi.data(), n);
  ops->synchronize();
  fast->matmul_grouped(x.data(), c.offsets.data(), static_cast<int32_t>(c.w.size()), c.w.data(),
                       yf.data(), n, NumericsMode::kFast);
  fast->synchronize();
  const auto a = yi.download();
  const auto b = yf.download();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double{a[i]} - b[i]));
  std::printf("  [moe grouped gemm fast] max |fast - invariant| = %.3g\n", worst);
  EXPECT_LT(worst, 1e-3);  // |y| ~ 0.5: fp32 accumulation orders of 2048 products
}

// The transformers checkpoints of tests/data/loaders/hf_v5 (written by
// scripts/ref/hf_checkpoints.py; fp32 logits of bf16-exact weights) on the CUDA backend: every
// prompt position within 0.05·max|logit| of transformers' row (the GPU rounds each GEMM input
// to bf16; the CloseToCpuBackend tolerance), and the whole prompt in one step = one token a
// step, bit for bit (the experts' groups change size, the bits do not).
TEST(CudaMoe, TransformersMoeFixturesOnTheGpu) {
  DETLLM_SKIP_WITHOUT_GPU();
  namespace fs = std::filesystem;
  // The source tree this binary was built from, or (a binary carried to a GPU machine) the
  // working directory: scripts/gpu/moe_gpu.sh runs from the repository root.
  fs::path data;
  for (const fs::path& root : {fs::path(DETLLM_SOURCE_DIR), fs::current_path()}) {
    if (fs::exists(root / "tests" / "data" / "loaders" / "hf_v5" / "olmoe")) {
      data = root / "tests" / "data" / "loaders" / "hf_v5";
      break;
    }
  }
  ASSERT_FALSE(data.empty()) << "tests/data/loaders/hf_v5 not found under " << DETLLM_SOURCE_DIR
                             << " nor the working directory: run from the repository root";
  for (const char* c : {"qwen3_moe", "qwen3_moe_ties", "mixtral", "qwen2_moe", "olmoe"}) {
    SCOPED_TRACE(c);
    std::ifstream gin(data / c / "golden.json");
    ASSERT_TRUE(gin.good()) << (data / c);
    const nlohmann::json golden = nlohmann::json::parse(gin);
    std::ifstream lin(data / c / "logits.f32", std::ios::binary | std::ios::ate);
    ASSERT_TRUE(lin.good());
    std::vector<float> ref(static_cast<size_t>(lin.tellg()) / sizeof(float));
    lin.seekg(0);
    lin.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(ref.size() * 4));
    const auto model = load_model((data / c).string());
    ASSERT_TRUE(model->config.moe.active());
    auto ops = cuda_testing::invariant_ops();
    const LlamaModel llama(model->config, model->weights, *ops);
    const size_t vocab = static_cast<size_t>(model->config.vocab_size);
    size_t offset = 0;
    float worst = 0;
    for (const auto& seq : golden["sequences"]) {
      const auto ids = seq["tokens"].get<std::vector<int32_t>>();
      SoloRunner whole(llama, static_cast<int32_t>(ids.size()) + 1);
      const std::vector<float> ours = whole.feed(ids, /*all_logits=*/true);
      ASSERT_EQ(ours.size(), ids.size() * vocab);
      ASSERT_LE(offset + ours.size(), ref.size());
      SoloRunner stepwise(llama, static_cast<int32_t>(ids.size()) + 1);
      for (size_t p = 0; p < ids.size(); ++p) {
        const std::vector<float> row = stepwise.feed(std::span(ids).subspan(p, 1));
        EXPECT_BITS_EQ(row.data(), ours.data() + p * vocab, static_cast<int64_t>(vocab));
        float max_abs = 0, max_diff = 0;
        for (size_t v = 0; v < vocab; ++v) {
          const float theirs = ref[offset + p * vocab + v];
          max_abs = std::max(max_abs, std::fabs(theirs));
          max_diff = std::max(max_diff, std::fabs(ours[p * vocab + v] - theirs));
        }
        worst = std::max(worst, max_diff / max_abs);
        EXPECT_LE(max_diff, 0.05f * max_abs) << "position " << p;
      }
      offset += ours.size();
    }
    std::printf("  [moe fixture %s] worst max|gpu - transformers| / max|logit| = %.3g\n", c,
                worst);
  }
}

}  // namespace
}  // namespace detllm::kernels
