// Row-wise and elementwise ops are invariant bit for bit: an RMSNorm row, a rope token, a
// silu_mul element computed alone equals the same one inside a larger call at any index, with
// 1–4 threads. Run: build-kern/tests/test_kernels --gtest_filter='*Invariance*'.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace detllm::kernels {
namespace {

using testing::random_floats;

TEST(RmsnormInvariance, RowAloneEqualsRowInBatch) {
  for (int dim : {576, 61}) {
    const auto w = random_floats(dim, 30);
    const auto probe = random_floats(dim, 31, -2.0f, 2.0f);
    std::vector<float> solo(dim);
    make_cpu_ops(1)->rmsnorm(probe.data(), w.data(), 1, dim, 1e-5f, solo.data());
    for (int n_threads : {1, 2, 3, 4}) {
      auto ops = make_cpu_ops(n_threads);
      for (int n : {2, 5, 64, 300}) {
        for (int at : {0, n / 2, n - 1}) {
          auto x = random_floats(static_cast<size_t>(n) * dim, 32 + n, -2.0f, 2.0f);
          std::copy(probe.begin(), probe.end(), x.begin() + static_cast<int64_t>(at) * dim);
          std::vector<float> out(x.size());
          ops->rmsnorm(x.data(), w.data(), n, dim, 1e-5f, out.data());
          SCOPED_TRACE(::testing::Message()
                       << "dim " << dim << " threads " << n_threads << " n " << n << " at " << at);
          EXPECT_BITS_EQ(out.data() + static_cast<int64_t>(at) * dim, solo.data(), dim);
        }
      }
    }
  }
}

TEST(RopeInvariance, TokenAloneEqualsTokenInBatch) {
  const int heads = 9, hd = 64;
  RopeTable table;
  table.rot_dim = hd;
  for (int i = 0; i < hd / 2; ++i) table.inv_freq.push_back(std::pow(100000.0f, -2.0f * i / hd));
  const auto probe = random_floats(heads * hd, 40);
  const int32_t probe_pos = 1234;
  std::vector<float> solo = probe;
  make_cpu_ops(1)->rope(solo.data(), 1, heads, hd, &probe_pos, table);
  for (int n_threads : {1, 2, 4}) {
    auto ops = make_cpu_ops(n_threads);
    for (int n : {3, 40}) {
      const int at = n / 2;
      auto x = random_floats(static_cast<size_t>(n) * heads * hd, 41 + n);
      std::copy(probe.begin(), probe.end(), x.begin() + static_cast<int64_t>(at) * heads * hd);
      std::vector<int32_t> pos(n);
      for (int i = 0; i < n; ++i) pos[i] = i * 17;
      pos[at] = probe_pos;
      ops->rope(x.data(), n, heads, hd, pos.data(), table);
      EXPECT_BITS_EQ(x.data() + static_cast<int64_t>(at) * heads * hd, solo.data(), heads * hd);
    }
  }
}

// An element's silu_mul bits do not depend on its index (vector body vs tail) or the split.
TEST(ElementwiseInvariance, SiluMulElementDoesNotDependOnPlace) {
  const int64_t n = 70001;
  const auto g = random_floats(n, 50, -12.0f, 12.0f);
  const auto u = random_floats(n, 51);
  std::vector<float> full(n);
  make_cpu_ops(1)->silu_mul(g.data(), u.data(), n, full.data());
  for (int n_threads : {2, 3, 4}) {
    std::vector<float> out(n);
    make_cpu_ops(n_threads)->silu_mul(g.data(), u.data(), n, out.data());
    EXPECT_BITS_EQ(out.data(), full.data(), n);
  }
  auto ops = make_cpu_ops(1);
  for (int64_t offset : {1, 3, 7, 13}) {  // shifted sub-ranges put elements in other lanes
    const int64_t len = 1000 + offset;
    std::vector<float> out(len);
    ops->silu_mul(g.data() + offset, u.data() + offset, len, out.data());
    EXPECT_BITS_EQ(out.data(), full.data() + offset, len);
  }
}

}  // namespace
}  // namespace detllm::kernels
