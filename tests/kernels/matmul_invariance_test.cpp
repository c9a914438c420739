// Matmul batch invariance, bit for bit: a row of y computed alone (m = 1, one thread) equals
// the same row computed inside batches of m rows at several row indices, with 1–4 threads,
// for shapes with K % 8 != 0 and N not a multiple of any tile. Run:
// build-kern/tests/test_kernels --gtest_filter='MatmulInvariance*'.
#include <gtest/gtest.h>

#include <immintrin.h>

#include <memory>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace detllm::kernels {
namespace {

using testing::random_floats;

struct Shape {
  int n, k;
};

void check_row_invariance(const WeightMatrix& w, const float* bias, uint32_t seed) {
  const int k = static_cast<int>(w.cols), n = static_cast<int>(w.rows);
  const auto probe = random_floats(k, seed);  // the row under test
  auto solo_ops = make_cpu_ops(1);
  std::vector<float> y_solo(n);
  solo_ops->matmul(probe.data(), 1, w, bias, y_solo.data());

  for (int n_threads : {1, 2, 3, 4}) {
    auto ops = make_cpu_ops(n_threads);
    for (int m : {1, 2, 3, 5, 8, 17, 64, 129}) {
      for (int at : {0, m / 2, m - 1}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k << " threads " << n_threads
                                          << " m " << m << " row " << at);
        auto x = random_floats(static_cast<size_t>(m) * k, seed + 1000 * m + at);
        std::copy(probe.begin(), probe.end(), x.begin() + static_cast<int64_t>(at) * k);
        std::vector<float> y(static_cast<size_t>(m) * n);
        ops->matmul(x.data(), m, w, bias, y.data());
        EXPECT_BITS_EQ(y.data() + static_cast<int64_t>(at) * n, y_solo.data(), n);
      }
    }
  }
}

TEST(MatmulInvariance, F32RowsAloneEqualRowsInBatches) {
  for (const Shape s : {Shape{37, 29}, Shape{192, 576}, Shape{50, 64}, Shape{13, 1537}, Shape{1, 8},
                        Shape{25, 3}}) {
    const auto wd = random_floats(static_cast<size_t>(s.n) * s.k, 17);
    const auto bias = random_floats(s.n, 18);
    const WeightMatrix w{wd.data(), DType::kF32, s.n, s.k};
    check_row_invariance(w, nullptr, 19);
    check_row_invariance(w, bias.data(), 20);
  }
}

TEST(MatmulInvariance, HalfWeightsRowsAloneEqualRowsInBatches) {
  const int n = 41, k = 75;
  const auto wf = random_floats(static_cast<size_t>(n) * k, 21);
  std::vector<uint16_t> wb(wf.size()), wh(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) {
    wb[i] = f32_to_bf16(wf[i]);
    wh[i] = static_cast<uint16_t>(_cvtss_sh(wf[i], _MM_FROUND_TO_NEAREST_INT));
  }
  check_row_invariance(WeightMatrix{wb.data(), DType::kBF16, n, k}, nullptr, 22);
  check_row_invariance(WeightMatrix{wh.data(), DType::kF16, n, k}, nullptr, 23);
}

// Widened half weights give the same bits as the same values stored as fp32 (exact widening,
// same accumulation), so a model may store either.
TEST(MatmulInvariance, Bf16EqualsItsFp32Widening) {
  const int m = 7, n = 30, k = 61;
  const auto x = random_floats(static_cast<size_t>(m) * k, 24);
  const auto wf = random_floats(static_cast<size_t>(n) * k, 25);
  std::vector<uint16_t> wb(wf.size());
  std::vector<float> wbf(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) {
    wb[i] = f32_to_bf16(wf[i]);
    wbf[i] = bf16_to_f32(wb[i]);
  }
  auto ops = make_cpu_ops(2);
  std::vector<float> a(m * n), b(m * n);
  ops->matmul(x.data(), m, WeightMatrix{wb.data(), DType::kBF16, n, k}, nullptr, a.data());
  ops->matmul(x.data(), m, WeightMatrix{wbf.data(), DType::kF32, n, k}, nullptr, b.data());
  EXPECT_BITS_EQ(a.data(), b.data(), m * n);
}

// Repeated calls on the same pool, and a fresh pool, give the same bits (no hidden state).
TEST(MatmulInvariance, RunToRun) {
  const int m = 33, n = 70, k = 100;
  const auto x = random_floats(static_cast<size_t>(m) * k, 26);
  const auto wd = random_floats(static_cast<size_t>(n) * k, 27);
  const WeightMatrix w{wd.data(), DType::kF32, n, k};
  auto ops = make_cpu_ops(2);
  std::vector<float> a(m * n), b(m * n), c(m * n);
  ops->matmul(x.data(), m, w, nullptr, a.data());
  ops->matmul(x.data(), m, w, nullptr, b.data());
  make_cpu_ops(3)->matmul(x.data(), m, w, nullptr, c.data());
  EXPECT_BITS_EQ(a.data(), b.data(), m * n);
  EXPECT_BITS_EQ(a.data(), c.data(), m * n);
}

}  // namespace
}  // namespace detllm::kernels
