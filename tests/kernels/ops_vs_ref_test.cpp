// Every CPU op against the scalar reference (kernels/ref/), each within a stated tolerance:
// exact for copies and for rope (same mul/sub sequence), an error bound derived from fp32
// reduction order elsewhere. Run: build-kern/tests/test_kernels --gtest_filter='VsRef*'.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace detllm::kernels {
namespace {

using testing::random_floats;

constexpr float kUnitRoundoff = 5.9604645e-8f;  // 2^-24

struct MatmulShape {
  int m, n, k;
};

// |cpu - ref| <= 2 (K + 8) u Σ_k |x_k w_k| (+ |bias|): both sums are fp32 with different
// orders (sequential vs 8 lanes + tree); each is within (K + 3) u Σ|x w| of the exact value.
void expect_matmul_close(const float* x, const WeightMatrix& w, const float* bias, const float* got,
                         const float* want, int m) {
  const std::vector<float> wf = [&] {
    std::vector<float> f(w.rows * w.cols);
    for (int64_t i = 0; i < w.rows * w.cols; ++i) {
      if (w.dtype == DType::kF32)
        f[i] = static_cast<const float*>(w.data)[i];
      else if (w.dtype == DType::kBF16)
        f[i] = bf16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
      else
        f[i] = f16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
    }
    return f;
  }();
  int failures = 0;
  for (int i = 0; i < m; ++i) {
    for (int64_t j = 0; j < w.rows; ++j) {
      double abs_sum = bias != nullptr ? std::fabs(bias[j]) : 0.0;
      for (int64_t kk = 0; kk < w.cols; ++kk)
        abs_sum += std::fabs(static_cast<double>(x[i * w.cols + kk]) * wf[j * w.cols + kk]);
      const double tol = 2.0 * (w.cols + 8) * kUnitRoundoff * abs_sum + 1e-30;
      const double err = std::fabs(static_cast<double>(got[i * w.rows + j]) - want[i * w.rows + j]);
      if (err > tol && ++failures <= 5)
        ADD_FAILURE() << "y[" << i << "," << j << "] cpu " << got[i * w.rows + j] << " ref "
                      << want[i * w.rows + j] << " err " << err << " > tol " << tol;
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(VsRef, MatmulF32WithAndWithoutBias) {
  auto ref = make_ref_ops();
  auto cpu = make_cpu_ops(2);
  for (const MatmulShape s : {MatmulShape{1, 576, 576},
                              {5, 192, 576},
                              {9, 37, 29},
                              {17, 13, 7},
                              {64, 50, 1536},
                              {3, 1, 1}}) {
    SCOPED_TRACE(::testing::Message() << "m " << s.m << " n " << s.n << " k " << s.k);
    const auto x = random_floats(static_cast<size_t>(s.m) * s.k, 1);
    const auto wd = random_floats(static_cast<size_t>(s.n) * s.k, 2);
    const auto bias = random_floats(s.n, 3);
    const WeightMatrix w{wd.data(), DType::kF32, s.n, s.k};
    for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
      std::vector<float> y_ref(static_cast<size_t>(s.m) * s.n), y_cpu(y_ref.size());
      ref->matmul(x.data(), s.m, w, b, y_ref.data());
      cpu->matmul(x.data(), s.m, w, b, y_cpu.data());
      expect_matmul_close(x.data(), w, b, y_cpu.data(), y_ref.data(), s.m);
    }
  }
}

TEST(VsRef, MatmulHalfWeights) {
  auto ref = make_ref_ops();
  auto cpu = make_cpu_ops(2);
  const int m = 6, n = 45, k = 83;
  const auto x = random_floats(static_cast<size_t>(m) * k, 4);
  const auto wf = random_floats(static_cast<size_t>(n) * k, 5);
  for (DType t : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint16_t> wh(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) {
      wh[i] = t == DType::kBF16
                  ? f32_to_bf16(wf[i])
                  : static_cast<uint16_t>(_cvtss_sh(wf[i], _MM_FROUND_TO_NEAREST_INT));
    }
    const WeightMatrix w{wh.data(), t, n, k};
    std::vector<float> y_ref(m * n), y_cpu(m * n);
    ref->matmul(x.data(), m, w, nullptr, y_ref.data());
    cpu->matmul(x.data(), m, w, nullptr, y_cpu.data());
    expect_matmul_close(x.data(), w, nullptr, y_cpu.data(), y_ref.data(), m);
  }
}

// RMSNorm: relative error <= (dim + 8) u (sum of squares reordered, then 1/sqrt, 2 muls).
TEST(VsRef, Rmsnorm) {
  auto ref = make_ref_ops();
  auto cpu = make_cpu_ops(2);
  for (int dim : {576, 64, 13, 1}) {
    const int n = 7;
    const auto x = random_floats(static_cast<size_t>(n) * dim, 6, -3.0f, 3.0f);
    const auto w = random_floats(dim, 7);
    std::vector<float> a(x.size()), b(x.size());
    ref->rmsnorm(x.data(), w.data(), n, dim, 1e-5f, a.data());
    cpu->rmsnorm(x.data(), w.data(), n, dim, 1e-5f, b.data());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_LE(std::fabs(a[i] - b[i]), (dim + 8) * kUnitRoundoff * std::fabs(a[i]) + 1e-30f)
          << "dim " << dim << " i " << i;
    // out may alias x.
    std::vector<float> inplace = x;
    cpu->rmsnorm(inplace.data(), w.data(), n, dim, 1e-5f, inplace.data());
    EXPECT_BITS_EQ(inplace.data(), b.data(), static_cast<int64_t>(b.size()));
  }
}

// Rope: the CPU kernel does the reference's exact mul/sub sequence with the same libm calls.
TEST(VsRef, RopeIsExact) {
  auto ref = make_ref_ops();
  auto cpu = make_cpu_ops(2);
  for (int rot_dim : {64, 32, 18}) {
    const int n = 9, heads = 3, hd = 64;
    RopeTable table;
    table.rot_dim = rot_dim;
    for (int i = 0; i < rot_dim / 2; ++i)
      table.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / rot_dim));
    const std::vector<int32_t> pos = {0, 1, 2, 31, 32, 100, 1000, 4095, 70000};
    auto a = random_floats(static_cast<size_t>(n) * heads * hd, 8);
    auto b = a;
    ref->rope(a.data(), n, heads, hd, pos.data(), table);
    cpu->rope(b.data(), n, heads, hd, pos.data(), table);
    EXPECT_BITS_EQ(a.data(), b.data(), static_cast<int64_t>(a.size()));
  }
}

// silu_mul: exp8 is within a few ulp of expf, so |cpu - ref| <= 8 u |ref| (+ denormal slack).
TEST(VsRef, SiluMulAndAdd) {
  auto ref = make_ref_ops();
  auto cpu = make_cpu_ops(2);
  const int64_t n = 100003;
  const auto g = random_floats(n, 9, -20.0f, 20.0f);
  const auto u = random_floats(n, 10);
  std::vector<float> a(n), b(n);
  ref->silu_mul(g.data(), u.data(), n, a.data());
  cpu->silu_mul(g.data(), u.data(), n, b.data());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_LE(std::fabs(a[i] - b[i]), 8 * kUnitRoundoff * std::fabs(a[i]) + 1e-35f) << i;
  auto xa = g, xb = g;
  ref->add(xa.data(), u.data(), n);
  cpu->add(xb.data(), u.data(), n);
  EXPECT_BITS_EQ(xa.data(), xb.data(), n);
}

TEST(VsRef, EmbeddingIsExact) {
  auto ref = make_ref_ops();
  auto cpu = make_cpu_ops(2);
  const int vocab = 50, dim = 20;
  const auto table_f = random_floats(static_cast<size_t>(vocab) * dim, 11);
  std::vector<uint16_t> table_h(table_f.size());
  for (size_t i = 0; i < table_f.size(); ++i) table_h[i] = f32_to_bf16(table_f[i]);
  const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
  for (const WeightMatrix& t : {WeightMatrix{table_f.data(), DType::kF32, vocab, dim},
                                WeightMatrix{table_h.data(), DType::kBF16, vocab, dim}}) {
    std::vector<float> a(ids.size() * dim), b(a.size());
    ref->embedding(t, ids.data(), 5, a.data());
    cpu->embedding(t, ids.data(), 5, b.data());
    EXPECT_BITS_EQ(a.data(), b.data(), static_cast<int64_t>(a.size()));
  }
  const int32_t bad = vocab;
  std::vector<float> out(dim);
  EXPECT_THROW(
      cpu->embedding(WeightMatrix{table_f.data(), DType::kF32, vocab, dim}, &bad, 1, out.data()),
      Error);
}

// Attention: outputs are convex combinations of v in [-1, 1]; scores, exp and sums are
// reordered (online softmax over 32-position tiles vs two-pass), so |cpu - ref| <= 2e-5.
TEST(VsRef, AttentionPrefillAndDecode) {
  for (const testing::AttnShape shape :
       {testing::AttnShape{6, 2, 64, 16}, testing::AttnShape{4, 4, 36, 5},
        testing::AttnShape{9, 3, 64, 32}, testing::AttnShape{2, 1, 7, 3}}) {
    SCOPED_TRACE(::testing::Message() << "heads " << shape.n_heads << "/" << shape.n_kv_heads
                                      << " hd " << shape.head_dim << " bs " << shape.block_size);
    auto ref = make_ref_ops();
    auto cpu = make_cpu_ops(2);
    const std::vector<int> lens = {100, 33};
    testing::PagedWorld a(shape, {1, 2}, lens, 5), b(shape, {1, 2}, lens, 5);
    a.step(*ref, {{0, 0, 90}, {1, 0, 33}});
    b.step(*cpu, {{0, 0, 90}, {1, 0, 33}});
    for (int p = 90; p < 100; ++p) {  // decode steps
      a.step(*ref, {{0, p, 1}});
      b.step(*cpu, {{0, p, 1}});
    }
    double max_err = 0.0;
    for (int s = 0; s < 2; ++s) {
      for (int p = 0; p < lens[s]; ++p) {
        const auto& x = a.output(s, p);
        const auto& y = b.output(s, p);
        for (size_t i = 0; i < x.size(); ++i)
          max_err = std::max(max_err, static_cast<double>(std::fabs(x[i] - y[i])));
      }
    }
    EXPECT_LE(max_err, 2e-5);
    RecordProperty("max_abs_err", std::to_string(max_err));
  }
}

TEST(VsRef, KvAppendAndAttentionRejectBadMetadata) {
  auto cpu = make_cpu_ops(1);
  std::vector<float> k(2 * 4 * 8, 0.0f), v(k.size(), 0.0f), row(8, 1.0f), out(8);
  const KvCacheLayer cache{k.data(), v.data(), 2, 4, 1, 8};
  const int32_t pos = 0, seq = 0, bad_slot = 8, table_bad[1] = {5};
  const StepBatch bad_slot_batch{1, &pos, &seq, &bad_slot, 1, 1, table_bad};
  EXPECT_THROW(cpu->kv_append(row.data(), row.data(), bad_slot_batch, cache), Error);
  EXPECT_THROW(cpu->attention(row.data(), cache, bad_slot_batch, 1, 1.0f, out.data()), Error);
}

}  // namespace
}  // namespace detllm::kernels
