// Every CUDA op against the scalar reference (kernels/ref), each within a stated tolerance:
// exact for copies (embedding, kv_append, gather, add); for reductions a bound derived from
// fp32 rounding with a different summation order; the GEMM against the reference run on the
// same bf16-rounded operands (the CUDA backend rounds activations to bf16 for the tensor cores).
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaVsRef*' (skips without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda/cuda_test_util.h"

namespace detllm::kernels {
namespace {

using namespace cuda_testing;

constexpr double kU = 5.9604645e-8;  // fp32 unit roundoff 2^-24

TEST(CudaVsRef, EmbeddingBf16Exact) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto gpu = invariant_ops();
  auto ref = make_ref_ops();
  const int vocab = 300, dim = 72, n = 9;
  const auto table = to_bf16(random_floats(size_t(vocab) * dim, 1));
  const std::vector<int32_t> ids = {0, 5, 299, 5, 17, 100, 1, 0, 250};
  std::vector<float> want(size_t(n) * dim);
  ref->embedding({table.data(), DType::kBF16, vocab, dim}, ids.data(), n, want.data());
  DeviceArray<uint16_t> dt(*gpu, table);
  DeviceArray<int32_t> di(*gpu, ids);
  DeviceArray<float> dout(*gpu, want.size());
  gpu->embedding({dt.data(), DType::kBF16, vocab, dim}, di.data(), n, dout.data());
  const auto got = dout.download();
  EXPECT_EQ(first_bit_difference(got.data(), want.data(), got.size()), -1);
}

// |gpu - ref| ≤ 2 dim u |ref|: the two sums of squares differ only in order (each within
// dim·u of exact), the rest is rounded identically.
TEST(CudaVsRef, RmsNorm) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto gpu = invariant_ops();
  auto ref = make_ref_ops();
  for (int dim : {16, 64, 576, 4096, 1000}) {
    for (int n : {1, 7, 40}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << " n " << n);
      const auto x = random_floats(size_t(n) * dim, 2, -3.0f, 3.0f);
      const auto w = random_floats(dim, 3, 0.5f, 1.5f);
      std::vector<float> want(x.size());
      ref->rmsnorm(x.data(), w.data(), n, dim, 1e-5f, want.data());
      DeviceArray<float> dx(*gpu, x), dw(*gpu, w), dout(*gpu, x.size());
      gpu->rmsnorm(dx.data(), dw.data(), n, dim, 1e-5f, dout.data());
      const auto got = dout.download();
      int bad = 0;
      for (size_t i = 0; i < got.size(); ++i)
        if (std::fabs(got[i] - want[i]) > 2.0 * (dim + 4) * kU * std::fabs(want[i]) + 1e-30 &&
            ++bad <= 3)
          ADD_FAILURE() << "i " << i << " gpu " << got[i] << " ref " << want[i];
      EXPECT_EQ(bad, 0);
      // In place (out aliases x) gives the same bits.
      gpu->rmsnorm(dx.data(), dw.data(), n, dim, 1e-5f, dx.data());
      const auto in_place = dx.download();
      EXPECT_EQ(first_bit_difference(in_place.data(), got.data(), got.size()), -1);
    }
  }
}

// The reference on the same bf16 operands; |gpu - ref| ≤ 4 (K + 64) u Σ_k |x_k w_k| (+|bias|):
// both are fp32 sums of exact products in different orders (tensor-core accumulation, split
// merges) — the factor 4 leaves room for the MMA's internal truncation.
TEST(CudaVsRef, MatmulBf16) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto gpu = invariant_ops();
  auto fast = fast_ops();
  auto ref = make_ref_ops();
  struct Shape {
    int m, n, k;
  };
  for (const Shape s : {Shape{1, 576, 576}, {5, 192, 576}, {17, 100, 64}, {40, 1000, 256},
                        {3, 37, 520}, {300, 520, 1024}, {16, 4096, 4096}, {64, 256, 14336},
                        {129, 136, 160}}) {
    SCOPED_TRACE(::testing::Message() << "m " << s.m << " n " << s.n << " k " << s.k);
    const auto x = random_floats(size_t(s.m) * s.k, 4);
    const auto wf = random_floats(size_t(s.n) * s.k, 5);
    const auto bias = random_floats(s.n, 6);
    const auto wb = to_bf16(wf);
    const auto xr = round_bf16(x);
    const auto wr = round_bf16(wf);
    std::vector<float> want(size_t(s.m) * s.n);
    ref->matmul(xr.data(), s.m, {wb.data(), DType::kBF16, s.n, s.k}, bias.data(), want.data());
    for (Ops* ops : {gpu.get(), fast.get()}) {
      SCOPED_TRACE(std::string(ops->name()));
      DeviceArray<float> dx(*ops, x), db(*ops, bias), dy(*ops, want.size());
      DeviceArray<uint16_t> dw(*ops, wb);
      ops->matmul(dx.data(), s.m, {dw.data(), DType::kBF16, s.n, s.k}, db.data(), dy.data());
      const auto got = dy.download();
      int bad = 0;
      for (int i = 0; i < s.m; ++i) {
        for (int j = 0; j < s.n; ++j) {
          double abs_sum = std::fabs(bias[j]);
          for (int kk = 0; kk < s.k; ++kk)
            abs_sum += std::fabs(double(xr[size_t(i) * s.k + kk]) * wr[size_t(j) * s.k + kk]);
          const double tol = 4.0 * (s.k + 64) * kU * abs_sum + 1e-30;
          const size_t e = size_t(i) * s.n + j;
          if (!(std::fabs(double(got[e]) - want[e]) <= tol) && ++bad <= 3)
            ADD_FAILURE() << "y[" << i << "," << j << "] gpu " << got[e] << " ref " << want[e]
                          << " tol " << tol;
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

// Only the cos/sin differ from the reference (CUDA's sincosf vs libm, a few ulp each);
// products and sums are rounded the same way: |gpu - ref| ≤ 1e-6 (|a| + |b|).
TEST(CudaVsRef, Rope) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto gpu = invariant_ops();
  auto ref = make_ref_ops();
  for (int rot : {64, 32}) {
    const int n = 6, heads = 3, hd = 64;
    RopeTable table;
    table.rot_dim = rot;
    for (int i = 0; i < rot / 2; ++i)
      table.inv_freq.push_back(std::pow(500000.0f, -2.0f * i / static_cast<float>(rot)));
    const std::vector<int32_t> pos = {0, 1, 17, 4095, 70000, 131071};
    const auto x = random_floats(size_t(n) * heads * hd, 7);
    std::vector<float> want = x;
    ref->rope(want.data(), n, heads, hd, pos.data(), table);
    DeviceArray<float> dx(*gpu, x);
    DeviceArray<int32_t> dp(*gpu, pos);
    gpu->rope(dx.data(), n, heads, hd, dp.data(), table);
    const auto got = dx.download();
    int bad = 0;
    for (int t = 0; t < n * heads; ++t) {
      for (int d = 0; d < hd; ++d) {
        const int pair = d < rot / 2 ? d : (d < rot ? d - rot / 2 : d);
        const double mag = std::fabs(x[t * hd + pair]) +
                           (pair + rot / 2 < hd ? std::fabs(x[t * hd + pair + rot / 2]) : 0.0);
        const size_t e = size_t(t) * hd + d;
        const double tol = d < rot ? 1e-6 * mag + 1e-30 : 0.0;
        if (!(std::fabs(double(got[e]) - want[e]) <= tol) && ++bad <= 3)
          ADD_FAILURE() << "row " << t << " dim " << d << " gpu " << got[e] << " ref " << want[e];
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// silu: expf vs libm exp (a few ulp) → |gpu - ref| ≤ 8 u |ref|; add and gather: exact.
TEST(CudaVsRef, PointwiseAndGather) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto gpu = invariant_ops();
  auto ref = make_ref_ops();
  const int64_t n = 10007;
  const auto g = random_floats(n, 8, -12.0f, 12.0f), u = random_floats(n, 9);
  std::vector<float> want(n);
  ref->silu_mul(g.data(), u.data(), n, want.data());
  DeviceArray<float> dg(*gpu, g), du(*gpu, u), dout(*gpu, n);
  gpu->silu_mul(dg.data(), du.data(), n, dout.data());
  auto got = dout.download();
  int bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (!(std::fabs(got[i] - want[i]) <= 8 * kU * std::fabs(want[i]) + 1e-37) && ++bad <= 3)
      ADD_FAILURE() << "silu i " << i << " gpu " << got[i] << " ref " << want[i];
  EXPECT_EQ(bad, 0);

  std::vector<float> sum = g;
  ref->add(sum.data(), u.data(), n);
  gpu->add(dg.data(), du.data(), n);
  got = dg.download();
  EXPECT_EQ(first_bit_difference(got.data(), sum.data(), n), -1);

  const int dim = 33;
  const std::vector<int32_t> rows = {4, 0, 300, 4};
  std::vector<float> gathered(rows.size() * dim);
  ref->gather_rows(sum.data(), dim, rows.data(), 4, gathered.data());
  DeviceArray<int32_t> dr(*gpu, rows);
  DeviceArray<float> dgat(*gpu, gathered.size());
  gpu->gather_rows(dg.data(), dim, dr.data(), 4, dgat.data());
  got = dgat.download();
  EXPECT_EQ(first_bit_difference(got.data(), gathered.data(), got.size()), -1);
}

// kv_append is a copy (exact); attention's softmax and weighted sum are reduced in another order
// (online, tiles of 32, splits of 128): |gpu - ref| ≤ 4 (len + head_dim) u max|v|.
TEST(CudaVsRef, KvAppendAndAttention) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto gpu = invariant_ops(-1, DType::kF32);  // the fp32-KV kernel; bf16: cuda_attention_tc_test
  auto ref = make_ref_ops();
  for (const AttnShape shape : {AttnShape{6, 2, 64, 16}, AttnShape{32, 8, 128, 16},
                                AttnShape{4, 4, 16, 1}, AttnShape{8, 1, 256, 32}}) {
    SCOPED_TRACE(::testing::Message() << shape.n_heads << "/" << shape.n_kv_heads << " hd "
                                      << shape.head_dim);
    const std::vector<int> lens = {1, 45, 700};
    const int n_seqs = 3;
    int max_blocks = 0;
    for (int l : lens) max_blocks = std::max(max_blocks, (l + shape.block_size - 1) / shape.block_size);
    const int n_blocks = n_seqs * max_blocks;
    std::vector<int32_t> tables(size_t(n_seqs) * max_blocks);
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), std::mt19937(5));
    // One prefill step of every sequence (whole prompts).
    std::vector<int32_t> pos, seq, slots;
    for (int s = 0; s < n_seqs; ++s)
      for (int p = 0; p < lens[s]; ++p) {
        pos.push_back(p);
        seq.push_back(s);
        slots.push_back(tables[size_t(s) * max_blocks + p / shape.block_size] * shape.block_size +
                        p % shape.block_size);
      }
    const int n = static_cast<int>(pos.size());
    const int64_t kv_row = int64_t{shape.n_kv_heads} * shape.head_dim;
    const int64_t q_row = int64_t{shape.n_heads} * shape.head_dim;
    const auto q = random_floats(n * q_row, 10, -4.0f, 4.0f);
    const auto k = random_floats(n * kv_row, 11), v = random_floats(n * kv_row, 12);
    const size_t cache_floats = size_t(n_blocks) * shape.block_size * kv_row;
    std::vector<float> hk(cache_floats, 0.0f), hv(cache_floats, 0.0f), want(n * q_row);
    const float scale = 1.0f / std::sqrt(float(shape.head_dim));
    StepBatch hb{n, pos.data(), seq.data(), slots.data(), n_seqs, max_blocks, tables.data()};
    const KvCacheLayer hc{hk.data(), hv.data(), n_blocks, shape.block_size, shape.n_kv_heads,
                          shape.head_dim};
    ref->kv_append(k.data(), v.data(), hb, hc);
    ref->attention(q.data(), hc, hb, shape.n_heads, scale, want.data());

    DeviceArray<float> dq(*gpu, q), dk(*gpu, k), dv(*gpu, v), dout(*gpu, want.size());
    DeviceArray<float> ck(*gpu, cache_floats), cv(*gpu, cache_floats);
    DeviceArray<int32_t> dpos(*gpu, pos), dseq(*gpu, seq), dslots(*gpu, slots),
        dtab(*gpu, tables);
    StepBatch db{n, dpos.data(), dseq.data(), dslots.data(), n_seqs, max_blocks, dtab.data()};
    const KvCacheLayer dc{ck.data(), cv.data(), n_blocks, shape.block_size, shape.n_kv_heads,
                          shape.head_dim};
    gpu->kv_append(dk.data(), dv.data(), db, dc);
    gpu->attention(dq.data(), dc, db, shape.n_heads, scale, dout.data());
    const auto got_k = ck.download(), got_v = cv.download(), got = dout.download();
    EXPECT_EQ(first_bit_difference(got_k.data(), hk.data(), cache_floats), -1);
    EXPECT_EQ(first_bit_difference(got_v.data(), hv.data(), cache_floats), -1);
    int bad = 0;
    for (int t = 0; t < n; ++t) {
      const double tol = 4.0 * (pos[t] + 1 + shape.head_dim) * kU;  // max|v| ≤ 1
      for (int64_t e = t * q_row; e < (t + 1) * q_row; ++e)
        if (!(std::fabs(double(got[e]) - want[e]) <= tol) && ++bad <= 3)
          ADD_FAILURE() << "token " << t << " (pos " << pos[t] << ") elem " << e - t * q_row
                        << " gpu " << got[e] << " ref " << want[e];
    }
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace
}  // namespace detllm::kernels
