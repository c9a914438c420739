// Mixture-of-experts ops (kernels/ops.h moe_route, moe_combine, matmul_grouped): every
// backend against the plain reference (kernels/ref/moe_ref.h), bit for bit; the tie rule
// (equal logits: the lower expert index first); both weightings (probabilities over all
// experts, and renormalised = softmax over the chosen logits); a grouped GEMM row equal to the
// row alone whatever its group. Run: build/tests/test_kernels --gtest_filter='Moe*'
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "kernels/ops.h"
#include "kernels/ref/moe_ref.h"

namespace detllm::kernels {
namespace {

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

Routed route(Ops& ops, const std::vector<float>& logits, int32_t n_experts, int32_t k,
             bool renormalize) {
  const int32_t n = static_cast<int32_t>(logits.size()) / n_experts;
  Routed r{std::vector<int32_t>(static_cast<size_t>(n) * k),
           std::vector<float>(static_cast<size_t>(n) * k)};
  ops.moe_route(logits.data(), n, n_experts, k, renormalize, r.experts.data(), r.weights.data());
  return r;
}

Routed route_ref(const std::vector<float>& logits, int32_t n_experts, int32_t k, bool renormalize) {
  const int32_t n = static_cast<int32_t>(logits.size()) / n_experts;
  Routed r{std::vector<int32_t>(static_cast<size_t>(n) * k),
           std::vector<float>(static_cast<size_t>(n) * k)};
  ref::moe_route(logits.data(), n, n_experts, k, renormalize, r.experts.data(), r.weights.data());
  return r;
}

std::vector<std::unique_ptr<Ops>> backends() {
  std::vector<std::unique_ptr<Ops>> b;
  b.push_back(make_ref_ops());
  b.push_back(make_cpu_ops(1));
  b.push_back(make_cpu_ops(3));
  return b;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Random logits with many exact ties (values drawn from a few levels) and some distinct ones.
std::vector<float> tied_logits(uint32_t seed, int32_t n, int32_t n_experts) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> level(0, 5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n) * n_experts);
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 3 == 0 ? normal(rng) : 0.5f * level(rng);
  return v;
}

TEST(MoeRoute, EveryBackendGivesTheReferenceBits) {
  for (int32_t n_experts : {4, 16, 60, 128}) {
    for (int32_t k : {1, 2, 4, 8}) {
      if (k > n_experts) continue;
      for (bool renorm : {false, true}) {
        const auto logits = tied_logits(static_cast<uint32_t>(n_experts * 31 + k), 37, n_experts);
        const Routed want = route_ref(logits, n_experts, k, renorm);
        for (auto& ops : backends()) {
          SCOPED_TRACE(testing::Message() << ops->name() << " experts " << n_experts << " k " << k
                                          << " renormalize " << renorm);
          const Routed got = route(*ops, logits, n_experts, k, renorm);
          EXPECT_EQ(got.experts, want.experts);
          EXPECT_TRUE(same_bits(got.weights, want.weights));
        }
      }
    }
  }
}

TEST(MoeRoute, TiesGoToTheLowerExpertIndex) {
  // Experts 1, 3, 5, 6 share the highest logit; 0 and 7 the next.
  const std::vector<float> logits = {1.0f, 2.0f, 0.0f, 2.0f, -1.0f, 2.0f, 2.0f, 1.0f};
  for (auto& ops : backends()) {
    SCOPED_TRACE(ops->name());
    EXPECT_EQ(route(*ops, logits, 8, 3, false).experts, (std::vector<int32_t>{1, 3, 5}));
    EXPECT_EQ(route(*ops, logits, 8, 5, false).experts, (std::vector<int32_t>{1, 3, 5, 6, 0}));
    EXPECT_EQ(route(*ops, logits, 8, 6, false).experts, (std::vector<int32_t>{1, 3, 5, 6, 0, 7}));
    // All equal: the first k experts.
    EXPECT_EQ(route(*ops, std::vector<float>(16, 0.25f), 16, 4, true).experts,
              (std::vector<int32_t>{0, 1, 2, 3}));
  }
}

TEST(MoeRoute, HighestLogitsComeFirst) {
  const std::vector<float> logits = {0.1f, -3.0f, 5.0f, 2.0f, 4.5f, -0.2f};
  for (auto& ops : backends()) {
    EXPECT_EQ(route(*ops, logits, 6, 4, false).experts, (std::vector<int32_t>{2, 4, 3, 0}))
        << ops->name();
  }
}

// Without renormalising, a weight is the expert's softmax probability over all experts;
// renormalised, the softmax over the chosen logits (Mixtral's definition; the same as the
// chosen probabilities divided by their sum). Checked in long double, to one fp32 rounding.
TEST(MoeRoute, WeightsAreTheSoftmaxProbabilities) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int32_t n_experts = 16, k = 4;
  std::vector<float> logits(n_experts * 9);
  for (float& v : logits) v = normal(rng);
  for (bool renorm : {false, true}) {
    const Routed r = route_ref(logits, n_experts, k, renorm);
    for (int32_t t = 0; t < 9; ++t) {
      const float* l = logits.data() + t * n_experts;
      long double sum = 0, sum_k = 0;
      for (int32_t j = 0; j < n_experts; ++j) sum += std::exp(static_cast<long double>(l[j]));
      for (int32_t q = 0; q < k; ++q)
        sum_k += std::exp(static_cast<long double>(l[r.experts[t * k + q]]));
      float total = 0;
      for (int32_t q = 0; q < k; ++q) {
        const long double e = std::exp(static_cast<long double>(l[r.experts[t * k + q]]));
        const double want = static_cast<double>(e / (renorm ? sum_k : sum));
        const float got = r.weights[t * k + q];
        EXPECT_NEAR(got, want, 2e-7 * want) << "token " << t << " rank " << q;
        total += got;
      }
      if (renorm) {
        EXPECT_NEAR(total, 1.0f, 1e-6f);
      } else {
        EXPECT_LT(total, 1.0f);
      }
    }
  }
}

TEST(MoeRoute, NanRanksAsMinusInfinityAndNothingCrashes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {nan, 1.0f, nan, 0.5f};
  for (auto& ops : backends()) {
    SCOPED_TRACE(ops->name());
    EXPECT_EQ(route(*ops, logits, 4, 2, false).experts, (std::vector<int32_t>{1, 3}));
    EXPECT_EQ(route(*ops, logits, 4, 3, false).experts, (std::vector<int32_t>{1, 3, 0}));
  }
}

TEST(MoeCombine, EveryBackendGivesTheReferenceBits) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int32_t n = 7, k = 4, dim = 40;
  std::vector<float> y(n * k * dim), w(n * k), shared(n * dim), gate(n);
  for (float& v : y) v = normal(rng);
  for (float& v : w) v = std::fabs(normal(rng));
  for (float& v : shared) v = normal(rng);
  for (float& v : gate) v = 4 * normal(rng);
  std::vector<int32_t> rows(n * k);
  for (int32_t i = 0; i < n * k; ++i) rows[i] = (i * 11) % (n * k);  // a permutation
  for (bool with_shared : {false, true}) {
    std::vector<float> want(n * dim), got(n * dim);
    const float* s = with_shared ? shared.data() : nullptr;
    const float* g = with_shared ? gate.data() : nullptr;
    ref::moe_combine(y.data(), rows.data(), w.data(), n, k, dim, s, g, want.data());
    for (auto& ops : backends()) {
      ops->moe_combine(y.data(), rows.data(), w.data(), n, k, dim, s, g, got.data());
      EXPECT_TRUE(same_bits(got, want)) << ops->name() << " shared " << with_shared;
    }
    // Token 0 by hand: Σ_r w_r y_r in rank order (+ sigmoid(g) shared).
    for (int32_t d = 0; d < dim; ++d) {
      float acc = 0;
      for (int32_t r = 0; r < k; ++r) acc += w[r] * y[rows[r] * dim + d];
      if (with_shared) acc += static_cast<float>(1 / (1 + std::exp(-double{gate[0]}))) * shared[d];
      EXPECT_NEAR(want[d], acc, 1e-6f * (1 + std::fabs(acc)));
    }
  }
}

// A row of a grouped GEMM has the bits it has alone, whatever the size of its group.
TEST(MoeGroupedMatmul, ARowIsTheRowAloneWhateverItsGroup) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int32_t k_in = 64, out = 48, n_groups = 3;
  std::vector<std::vector<float>> wdata(n_groups, std::vector<float>(out * k_in));
  std::vector<WeightMatrix> w;
  for (auto& d : wdata) {
    for (float& v : d) v = normal(rng);
    w.push_back({d.data(), DType::kF32, out, k_in});
  }
  const std::vector<int32_t> offsets = {0, 1, 1, 9};  // sizes 1, 0, 8
  std::vector<float> x(9 * k_in);
  for (float& v : x) v = normal(rng);
  for (auto& ops : backends()) {
    SCOPED_TRACE(ops->name());
    std::vector<float> y(9 * out);
    ops->matmul_grouped(x.data(), offsets.data(), n_groups, w.data(), y.data(), out);
    for (int32_t row = 0; row < 9; ++row) {
      const int32_t g = row == 0 ? 0 : 2;
      std::vector<float> alone(out);
      ops->matmul(x.data() + row * k_in, 1, w[g], nullptr, alone.data());
      EXPECT_EQ(std::memcmp(alone.data(), y.data() + row * out, out * sizeof(float)), 0)
          << "row " << row;
    }
  }
}

}  // namespace
}  // namespace detllm::kernels
