// The q8-activation numerics class (CpuActivations::kQ8): the AVX2 quantizer and matmul
// (kernels/cpu/matmul_q8.cpp) against their scalar definition (kernels/ref/q8_act_ref.h) bit
// for bit: quantized rows on random, tied, tiny, zero, inf and NaN blocks; the matmul on
// Q4_0 / Q4_1 / Q8_0 weights for m = 1…130 (every strip remainder), n not a multiple of the
// 8-lane tile, 1–4 threads, with and without bias, through cpu::matmul_q8 and through
// make_cpu_ops(·, kQ8). The definition itself: hand-computed cases, and close (a tolerance)
// to the fp32 matmul on the dequantized weights.
// Run: build/tests/test_kernels --gtest_filter='Q8Act*'.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/matmul_q8.h"
#include "kernels/ops.h"
#include "kernels/ref/q8_act_ref.h"

namespace detllm::kernels {
namespace {

using testing::random_floats;

constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0};

// rows × cols of type t from random fp32 weights by ggml's reference quantizers.
std::vector<uint8_t> quantized(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> w = random_floats(static_cast<size_t>(rows * cols), seed, -0.1f, 0.1f);
  std::vector<uint8_t> b(static_cast<size_t>(rows * dtype_row_bytes(t, cols)));
  for (int64_t r = 0; r < rows; ++r)
    quantize_row(t, w.data() + r * cols, b.data() + r * dtype_row_bytes(t, cols), cols);
  return b;
}

struct QRow {
  std::vector<int8_t> q;
  std::vector<float> d, s;
  std::vector<int32_t> sum;
  explicit QRow(int64_t k) : q(k), d(k / 32), s(k / 32), sum(k / 32) {}
  bool operator==(const QRow& o) const {
    return q == o.q && sum == o.sum && std::memcmp(d.data(), o.d.data(), 4 * d.size()) == 0 &&
           std::memcmp(s.data(), o.s.data(), 4 * s.size()) == 0;
  }
};

QRow ref_quant(const std::vector<float>& x) {
  QRow r(static_cast<int64_t>(x.size()));
  ref::quantize_row_q8_act(x.data(), x.size(), r.q.data(), r.d.data(), r.s.data(), r.sum.data());
  return r;
}
QRow simd_quant(const std::vector<float>& x) {
  QRow r(static_cast<int64_t>(x.size()));
  cpu::quantize_row_q8_act(x.data(), x.size(), r.q.data(), r.d.data(), r.s.data(), r.sum.data());
  return r;
}

TEST(Q8Act, QuantizerMatchesDefinitionOnRandomRows) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t k = 32 * (1 + trial % 20);
    const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 60) - 30);
    const std::vector<float> x = random_floats(k, 100 + trial, -scale, scale);
    EXPECT_TRUE(ref_quant(x) == simd_quant(x)) << "trial " << trial;
  }
}

TEST(Q8Act, QuantizerEdgeBlocks) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(32 * 6, 0.0f);
  // block 0: amax 127 -> d = 1, id = 1: ties round half to even
  x[0] = 127.0f, x[1] = 2.5f, x[2] = 3.5f, x[3] = -2.5f, x[4] = -0.5f, x[5] = 0.5f, x[6] = 1.5f;
  // block 1: all zero; block 2: tiny (d < FLT_MIN): treated as zero
  x[64] = 1e-37f, x[65] = -FLT_TRUE_MIN;
  x[96] = inf;        // block 3: inf -> d NaN, q 0
  x[128 + 7] = nan;   // block 4: NaN -> d NaN, q 0
  for (int e = 0; e < 32; ++e) x[160 + e] = -1.0f + e / 16.0f;  // block 5: ordinary
  const QRow r = ref_quant(x);
  EXPECT_TRUE(r == simd_quant(x));
  EXPECT_EQ(r.d[0], 1.0f);
  EXPECT_EQ(r.q[0], 127);
  EXPECT_EQ(r.q[1], 2);
  EXPECT_EQ(r.q[2], 4);
  EXPECT_EQ(r.q[3], -2);
  EXPECT_EQ(r.q[4], 0);
  EXPECT_EQ(r.q[5], 0);
  EXPECT_EQ(r.q[6], 2);
  EXPECT_EQ(r.sum[0], 127 + 2 + 4 - 2 + 2);
  EXPECT_EQ(r.s[0], 133.0f);
  EXPECT_EQ(r.d[1], 0.0f);
  EXPECT_EQ(r.d[2], 0.0f);
  EXPECT_EQ(r.sum[2], 0);
  EXPECT_TRUE(std::isnan(r.d[3]) && std::isnan(r.d[4]));
  EXPECT_TRUE(std::isnan(r.s[3]));
  EXPECT_EQ(r.sum[3], 0);
  EXPECT_EQ(r.q[96], 0);
  EXPECT_EQ(r.q[160], -127);  // -1 is the block's amax
  EXPECT_EQ(r.q[191], 119);   // 0.9375 · 127 = 119.06
}

TEST(Q8Act, DefinitionByHand) {
  // Q8_0 weights with d = 1 and integer activations whose amax is 127: d_x = 1, and the
  // result is the exact integer dot product.
  const int64_t k = 64;
  std::vector<float> w(2 * k), x(k);
  for (int64_t e = 0; e < k; ++e) {
    w[e] = static_cast<float>((e % 7) - 3);
    w[k + e] = e == 0 ? 127.0f : static_cast<float>(e % 5);
    x[e] = e == 0 || e == 32 ? 127.0f : static_cast<float>((e % 11) - 5);
  }
  // quantize_row (ggml's Q8_0) keeps integers whose block amax is 127 exactly (d = 1).
  std::vector<uint8_t> b(2 * dtype_row_bytes(DType::kQ8_0, k));
  quantize_row(DType::kQ8_0, w.data(), b.data(), k);
  quantize_row(DType::kQ8_0, w.data() + k, b.data() + dtype_row_bytes(DType::kQ8_0, k), k);
  std::vector<float> wd(2 * k);
  dequantize_row(DType::kQ8_0, b.data(), wd.data(), 2 * k);
  float y[2];
  const float bias[2] = {0.25f, -1.0f};
  ref::matmul_q8_act(x.data(), 1, {b.data(), DType::kQ8_0, 2, k}, bias, y);
  for (int j = 0; j < 2; ++j) {
    double dot = 0;
    for (int64_t e = 0; e < k; ++e) dot += static_cast<double>(wd[j * k + e]) * x[e];
    EXPECT_EQ(y[j], static_cast<float>(dot) + bias[j]) << j;
  }
}

// The definition approximates the fp32 product: |y_q8 - y_f32| <= 1% of Σ|x||w| (activation
// rounding to 8 bits: relative step 1/254 per element, errors partly cancel). A tolerance.
TEST(Q8Act, CloseToFp32OnDequantizedWeights) {
  const int64_t k = 576, n = 40, m = 3;
  for (DType t : kTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const std::vector<uint8_t> b = quantized(t, n, k, 5);
    std::vector<float> wd(n * k);
    dequantize_row(t, b.data(), wd.data(), n * k);
    const std::vector<float> x = random_floats(m * k, 6);
    std::vector<float> y(m * n);
    ref::matmul_q8_act(x.data(), m, {b.data(), t, n, k}, nullptr, y.data());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, mag = 0;
        for (int64_t e = 0; e < k; ++e) {
          exact += static_cast<double>(x[i * k + e]) * wd[j * k + e];
          mag += std::fabs(static_cast<double>(x[i * k + e]) * wd[j * k + e]);
        }
        EXPECT_LE(std::fabs(y[i * n + j] - exact), 0.01 * mag) << i << "," << j;
      }
    }
  }
}

TEST(Q8Act, MatmulMatchesDefinitionBitForBit) {
  const int64_t shapes[][2] = {{37, 64}, {8, 32}, {45, 576}};  // (n, k)
  const int32_t ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 17, 33, 64, 130};
  for (DType t : kTypes) {
    for (const auto& nk : shapes) {
      const int64_t n = nk[0], k = nk[1];
      SCOPED_TRACE(std::string(dtype_name(t)) + " n " + std::to_string(n) + " k " +
                   std::to_string(k));
      const std::vector<uint8_t> b = quantized(t, n, k, 11 + static_cast<uint32_t>(n));
      const WeightMatrix w{b.data(), t, n, k};
      const std::vector<float> bias = random_floats(n, 12);
      for (int32_t m : ms) {
        const std::vector<float> x = random_floats(m * k, 13 + m, -3.0f, 3.0f);
        for (const float* bp : {static_cast<const float*>(nullptr), bias.data()}) {
          std::vector<float> want(m * n);
          ref::matmul_q8_act(x.data(), m, w, bp, want.data());
          for (int threads = 1; threads <= 4; ++threads) {
            SCOPED_TRACE("m " + std::to_string(m) + " threads " + std::to_string(threads));
            ThreadPool pool(threads);
            std::vector<float> got(m * n, -7.0f);
            cpu::matmul_q8(pool, x.data(), m, w, bp, got.data());
            EXPECT_BITS_EQ(got.data(), want.data(), m * n);
          }
        }
      }
    }
  }
}

// A row's bits do not depend on the batch: row i of an m-row call = the 1-row call on it.
TEST(Q8Act, RowsIndependentOfBatch) {
  const int64_t n = 45, k = 576;
  for (DType t : kTypes) {
    const std::vector<uint8_t> b = quantized(t, n, k, 21);
    const WeightMatrix w{b.data(), t, n, k};
    const int32_t m = 37;
    const std::vector<float> x = random_floats(m * k, 22);
    ThreadPool pool(2);
    std::vector<float> all(m * n), one(n);
    cpu::matmul_q8(pool, x.data(), m, w, nullptr, all.data());
    for (int32_t i = 0; i < m; ++i) {
      cpu::matmul_q8(pool, x.data() + i * k, 1, w, nullptr, one.data());
      EXPECT_BITS_EQ(all.data() + i * n, one.data(), n);
    }
  }
}

TEST(Q8Act, CpuOpsUseItOnlyWhenAsked) {
  const int64_t n = 24, k = 64;
  const std::vector<uint8_t> b = quantized(DType::kQ4_1, n, k, 31);
  const WeightMatrix w{b.data(), DType::kQ4_1, n, k};
  const std::vector<float> x = random_floats(3 * k, 32);
  auto q8 = make_cpu_ops(2, CpuActivations::kQ8);
  auto f32 = make_cpu_ops(2);
  EXPECT_EQ(q8->name(), "cpu-q8");
  EXPECT_EQ(f32->name(), "cpu");
  std::vector<float> want(3 * n), got(3 * n), plain(3 * n);
  ref::matmul_q8_act(x.data(), 3, w, nullptr, want.data());
  q8->matmul(x.data(), 3, w, nullptr, got.data());
  f32->matmul(x.data(), 3, w, nullptr, plain.data());
  EXPECT_BITS_EQ(got.data(), want.data(), 3 * n);
  EXPECT_NE(testing::first_bit_difference(plain.data(), want.data(), 3 * n), -1)
      << "the kF32 path gave the q8 bits: the test would not see a wrong dispatch";
  // fp32 weights stay on the fp32 path under kQ8.
  const std::vector<float> wf = random_floats(n * k, 33);
  const WeightMatrix w32{wf.data(), DType::kF32, n, k};
  q8->matmul(x.data(), 3, w32, nullptr, got.data());
  f32->matmul(x.data(), 3, w32, nullptr, plain.data());
  EXPECT_BITS_EQ(got.data(), plain.data(), 3 * n);
}

TEST(Q8Act, RefusesOtherWeightTypesAndRaggedRows) {
  ThreadPool pool(1);
  std::vector<float> x(64), y(4);
  std::vector<uint8_t> b(4 * dtype_row_bytes(DType::kQ4_K, 256));
  EXPECT_THROW(cpu::matmul_q8(pool, x.data(), 1, {b.data(), DType::kQ4_K, 1, 256}, nullptr,
                              y.data()),
               Error);
  EXPECT_THROW(ref::matmul_q8_act(x.data(), 1, {b.data(), DType::kQ4_K, 1, 256}, nullptr,
                                  y.data()),
               Error);
  std::vector<int8_t> q(48);
  float d[2], s[2];
  int32_t sum[2];
  EXPECT_THROW(cpu::quantize_row_q8_act(x.data(), 48, q.data(), d, s, sum), Error);
  EXPECT_THROW(ref::quantize_row_q8_act(x.data(), 48, q.data(), d, s, sum), Error);
}

}  // namespace
}  // namespace detllm::kernels
