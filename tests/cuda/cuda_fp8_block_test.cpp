// The CUDA FP8 kernels for 128-column block scales (DeepSeek-style 128×128 weight blocks:
// DType::kF8E4M3B128, kF8E4M3G128; fp8_launch.h): the per-(token, 128-column group) activation
// quantizer = the library's reference (kernels/ref/fp8_linear.h
// fp8_quantize_activation_groups) bit for bit, special groups included; the block GEMM
// (launch_fp8_gemm_wg_blocks) within its stated bound of the exact block formula for both
// activation forms and both tile variants, with a bias — and outside it when every block is
// given block 0's scales (the check sees wrong scales); every row of an m-row block GEMM
// bit-identical to the same row of the 300-row GEMM at every m 1…300 and on Llama-shaped
// projections, each row alone = in the batch.
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaFp8Block*' (skips without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "cuda/cuda_test_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_launch.h"
#include "kernels/ref/fp8_linear.h"

namespace detllm::kernels {
namespace {

using cuda_testing::DeviceArray;
using cuda_testing::differ_on_device;

#define ASSERT_CUDA(expr)                                                      \
  do {                                                                         \
    const cudaError_t err_ = (expr);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

void sync() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

int64_t blocks(int64_t k) { return (k + kFp8ScaleBlock - 1) / kFp8ScaleBlock; }

// Activation rows whose magnitude changes by row and by 128-column group (2^-10 … 2^10), a few
// outliers: per-group scales then differ from the row's.
std::vector<float> activations(int32_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 999);
  std::vector<float> x(static_cast<size_t>(m) * k);
  for (int32_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const int e = static_cast<int>((r * 7 + i / kFp8ScaleBlock * 3) % 21) - 10;
      float v = normal(rng) * std::ldexp(1.0f, e);
      if (pick(rng) == 0) v *= 40.0f;
      x[static_cast<size_t>(r) * k + i] = v;
    }
  return x;
}

// bf16 bits of x (the GEMM inputs the model's producers write).
std::vector<uint16_t> bf16(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = f32_to_bf16(x[i]);
  return b;
}

// Scales and codes of the group quantizer = the reference's, bit for bit: random rows of ragged
// k (a partial last group), a zero group, a group with NaN, huge and tiny groups, static and
// bounded parameters; rows quantized alone = in the batch.
TEST(CudaFp8Block, QuantizeGroupsGivesTheReferenceBits) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  for (const int64_t k : {int64_t{16}, int64_t{128}, int64_t{200}, int64_t{528}, int64_t{4096}}) {
    for (const auto& [input_scale, bound] : {std::pair{0.0f, 0.0f}, std::pair{0.05f, 0.0f},
                                            std::pair{0.0f, 0.5f}}) {
      SCOPED_TRACE(::testing::Message() << "k " << k << " input_scale " << input_scale
                                        << " bound " << bound);
      const int32_t m = 9;
      std::vector<float> x = activations(m, k, static_cast<uint32_t>(k));
      for (int64_t i = 0; i < std::min<int64_t>(k, 128); ++i) x[1 * k + i] = 0.0f;  // zero group
      x[2 * k + 3] = std::numeric_limits<float>::quiet_NaN();
      for (int64_t i = 0; i < k; ++i) x[3 * k + i] *= 1e30f;   // saturating values
      for (int64_t i = 0; i < k; ++i) x[4 * k + i] *= 1e-30f;  // tiny
      // The device reads bf16: the reference quantizes the same bf16 values.
      const std::vector<uint16_t> xb = bf16(x);
      std::vector<float> xr(x.size());
      for (size_t i = 0; i < x.size(); ++i) xr[i] = bf16_to_f32(xb[i]);
      const int64_t nb = blocks(k);
      std::vector<uint8_t> q_ref(x.size());
      std::vector<float> s_ref(static_cast<size_t>(m * nb));
      for (int32_t r = 0; r < m; ++r)
        ref::fp8_quantize_activation_groups(xr.data() + r * k, k, input_scale, bound,
                                            q_ref.data() + r * k, s_ref.data() + r * nb);
      const float params_h[2] = {input_scale, bound};
      DeviceArray<uint16_t> dx(*ops, xb);
      DeviceArray<float> params(*ops, std::vector<float>(params_h, params_h + 2));
      DeviceArray<uint8_t> q(*ops, x.size());
      DeviceArray<float> s(*ops, s_ref.size());
      ASSERT_CUDA(cuda::launch_fp8_quantize_groups_params(dx.data(), true, m, k, params.data(),
                                                          q.data(), s.data(), nullptr));
      sync();
      EXPECT_EQ(q.download(), q_ref);
      const std::vector<float> s_got = s.download();
      ASSERT_EQ(std::memcmp(s_got.data(), s_ref.data(), s_ref.size() * sizeof(float)), 0);
      // Row 5 alone (its own launch) = row 5 of the batch.
      DeviceArray<uint8_t> q1(*ops, static_cast<size_t>(k));
      DeviceArray<float> s1(*ops, static_cast<size_t>(nb));
      ASSERT_CUDA(cuda::launch_fp8_quantize_groups_params(dx.data() + 5 * k, true, 1, k,
                                                          params.data(), q1.data(), s1.data(),
                                                          nullptr));
      sync();
      const std::vector<uint8_t> q1h = q1.download();
      EXPECT_TRUE(std::equal(q1h.begin(), q1h.end(), q_ref.begin() + 5 * k));
    }
  }
}

// One block-scaled problem on the device: activations quantized on the host by the reference
// (per token, or per token and group), FP8 weights with a distinct scale per (row, 128-column
// block).
struct BlockProblem {
  int32_t m;
  int64_t n, k, nb;
  bool groups;
  std::vector<uint8_t> xq, wq;
  std::vector<float> xs, ws;  // (m) or (m, nb); (n, nb)
  DeviceArray<uint8_t> d_xq, d_w;
  DeviceArray<float> d_xs, d_ws;
  BlockProblem(Ops& ops, int32_t m_, int64_t n_, int64_t k_, bool groups_, uint32_t seed)
      : m(m_), n(n_), k(k_), nb(blocks(k_)), groups(groups_), xq(static_cast<size_t>(m_ * k_)),
        wq(static_cast<size_t>(n_ * k_)),
        xs(static_cast<size_t>(groups_ ? m_ * blocks(k_) : m_)),
        ws(static_cast<size_t>(n_ * blocks(k_))), d_xq(ops, xq.size()), d_w(ops, wq.size()),
        d_xs(ops, xs.size()), d_ws(ops, ws.size()) {
    const std::vector<float> x = activations(m, k, seed);
    for (int32_t r = 0; r < m; ++r) {
      if (groups) {
        ref::fp8_quantize_activation_groups(x.data() + r * k, k, 0.0f, 0.0f,
                                            xq.data() + r * k, xs.data() + r * nb);
      } else {
        xs[r] = ref::fp8_activation_scale(x.data() + r * k, k, 0.0f, 0.0f);
        ref::fp8_quantize_activation(x.data() + r * k, k, xs[r], xq.data() + r * k);
      }
    }
    const std::vector<float> f =
        cuda_testing::fast_random_floats(static_cast<size_t>(n * k), seed + 1);
    for (int64_t c = 0; c < n; ++c)
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t k0 = b * kFp8ScaleBlock, len = std::min(kFp8ScaleBlock, k - k0);
        float amax = 0.0f;
        for (int64_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(f[c * k + k0 + i]));
        // A scale per block that varies over blocks and rows (0.5 … 4 × amax / 448).
        const float s = amax / kFp8E4m3Max * std::ldexp(1.0f, static_cast<int>((c + 3 * b) % 4) - 1);
        ws[c * nb + b] = s;
        for (int64_t i = 0; i < len; ++i)
          wq[c * k + k0 + i] = float_to_fp8_e4m3(f[c * k + k0 + i] / s);
      }
    d_xq.upload(xq);
    d_w.upload(wq);
    d_xs.upload(xs);
    d_ws.upload(ws);
  }
  cudaError_t run(int32_t rows, int variant, float* y, int32_t first_row = 0,
                  const float* bias = nullptr) const {
    const int64_t xs_row = groups ? nb : 1;
    return cuda::launch_fp8_gemm_wg_blocks(d_xq.data() + int64_t{first_row} * k,
                                           d_xs.data() + first_row * xs_row, rows, d_w.data(),
                                           d_ws.data(), n, k, groups, bias, y, variant, nullptr);
  }
  // The exact block formula in double for element (r, c), with weight scales of block `sb(b)`,
  // and its stated bound: per block the wgmma chain's 4 · 2^-12 Σ|p| (fp8_reference.h
  // gemm_wg_tolerance) times the block's scales, the blocks' fp32 products and adds
  // ((2 nb + 4) u of Σ|scaled P_b|), the epilogue (4 u |y|).
  struct Element {
    double value = 0, tol = 0;
  };
  template <class BlockOf>
  Element element(int32_t r, int64_t c, float bias, BlockOf&& sb) const {
    const double u = std::ldexp(1.0, -24);
    double sum = 0, abs = 0, chain = 0;
    for (int64_t b = 0; b < nb; ++b) {
      double p = 0, pa = 0;
      const int64_t k0 = b * kFp8ScaleBlock, k1 = std::min(k, k0 + kFp8ScaleBlock);
      for (int64_t i = k0; i < k1; ++i) {
        const double v = double(fp8_e4m3_to_float(xq[r * k + i])) *
                         double(fp8_e4m3_to_float(wq[c * k + i]));
        p += v;
        pa += std::fabs(v);
      }
      const double scale =
          double(ws[c * nb + sb(b)]) * (groups ? double(xs[r * nb + b]) : double(xs[r]));
      sum += p * scale;
      abs += pa * std::fabs(scale);
      chain += 4.0 * std::ldexp(1.0, -12) * pa * std::fabs(scale);
    }
    Element e;
    e.value = sum + bias;
    e.tol = chain + double(2 * nb + 4) * u * abs + 4.0 * u * std::fabs(e.value) + 1e-30;
    return e;
  }
};

// Every element within the stated bound of the exact block formula, both activation forms,
// both tile variants and the default, with a bias; and the negative check: the same outputs
// against block 0's scales for every block are outside that bound (wrong scales are seen).
TEST(CudaFp8Block, GemmIsWithinTheStatedBoundOfTheBlockFormula) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  struct Shape {
    int32_t m;
    int64_t n, k;
  };
  for (const bool groups : {false, true}) {
    for (const Shape& sh : {Shape{37, 256, 4096}, Shape{19, 37, 528}, Shape{5, 96, 14336},
                            Shape{130, 200, 16}}) {
      SCOPED_TRACE(::testing::Message() << (groups ? "G128" : "B128") << " m " << sh.m << " n "
                                        << sh.n << " k " << sh.k);
      const BlockProblem p(*ops, sh.m, sh.n, sh.k, groups, 21);
      const std::vector<float> bias_h =
          cuda_testing::fast_random_floats(static_cast<size_t>(sh.n), 5);
      DeviceArray<float> bias(*ops, bias_h);
      DeviceArray<float> y(*ops, static_cast<size_t>(sh.m) * sh.n);
      double worst = 0;
      int64_t caught = 0;
      for (int v = -1; v < cuda::kFp8GemmWgBlockVariants; ++v) {
        ASSERT_CUDA(p.run(sh.m, v, y.data(), 0, bias.data()));
        sync();
        const std::vector<float> got = y.download();
        int64_t bad = 0;
        for (int32_t r = 0; r < sh.m; ++r)
          for (int64_t c = 0; c < sh.n; ++c) {
            const auto e = p.element(r, c, bias_h[c], [](int64_t b) { return b; });
            const double err = std::fabs(double(got[r * sh.n + c]) - e.value);
            worst = std::max(worst, err / e.tol);
            if (!(err <= e.tol) && bad++ < 3)
              ADD_FAILURE() << "variant " << v << " (" << r << ", " << c << "): "
                            << got[r * sh.n + c] << " vs exact " << e.value << ", bound " << e.tol;
            const auto wrong = p.element(r, c, bias_h[c], [](int64_t) { return int64_t{0}; });
            if (std::fabs(double(got[r * sh.n + c]) - wrong.value) > wrong.tol) ++caught;
          }
        EXPECT_EQ(bad, 0) << "variant " << v;
      }
      if (p.nb > 1) {
        EXPECT_GT(caught, 0) << "block 0's scales everywhere pass the bound";
      }
      std::printf("  [fp8 block gemm %s] m %d n %lld k %lld: worst error %.3g of the bound\n",
                  groups ? "g128" : "b128", sh.m, static_cast<long long>(sh.n),
                  static_cast<long long>(sh.k), worst);
    }
  }
}

// The invariance: rows of an m-row block GEMM = the same rows of the 300-row GEMM (every m
// 1…300 on a ragged shape and on o_proj's; m ≤ 64 and the tile edges on the other Llama-3.1-8B
// projections), both variants at 300 rows = the default plan, each row alone = in the batch.
TEST(CudaFp8Block, GemmRowsEqualTheRowAloneAtEveryM) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  constexpr int32_t kMaxM = 300;
  std::vector<int32_t> every(kMaxM), edges(64);
  std::iota(every.begin(), every.end(), 1);
  std::iota(edges.begin(), edges.end(), 1);
  for (int32_t m : {65, 127, 128, 129, 255, 256, 257, 299}) edges.push_back(m);
  struct Shape {
    const char* name;
    int64_t n, k;
    bool every;
  };
  for (const bool groups : {false, true}) {
    for (const Shape& sh : {Shape{"ragged", 37, 528, true}, Shape{"o", 4096, 4096, true},
                            Shape{"gate_up", 28672, 4096, false},
                            Shape{"down", 4096, 14336, false}}) {
      SCOPED_TRACE(::testing::Message() << (groups ? "G128 " : "B128 ") << sh.name);
      const BlockProblem p(*ops, kMaxM, sh.n, sh.k, groups, 33);
      DeviceArray<float> big(*ops, static_cast<size_t>(kMaxM) * sh.n);
      DeviceArray<float> y(*ops, static_cast<size_t>(kMaxM) * sh.n);
      ASSERT_CUDA(p.run(kMaxM, -1, big.data()));
      std::vector<int32_t> bad;
      for (int32_t m : sh.every ? every : edges) {
        ASSERT_CUDA(p.run(m, -1, y.data()));
        if (differ_on_device(*ops, y.data(), big.data(), int64_t{m} * sh.n)) bad.push_back(m);
      }
      EXPECT_TRUE(bad.empty()) << bad.size() << " m differ, the first " << bad.front();
      for (int v = 0; v < cuda::kFp8GemmWgBlockVariants; ++v) {
        ASSERT_CUDA(p.run(kMaxM, v, y.data()));
        EXPECT_FALSE(differ_on_device(*ops, y.data(), big.data(), int64_t{kMaxM} * sh.n))
            << "variant " << v;
      }
      for (int32_t r : {0, 77, 299}) {  // row r alone, from its own offset
        ASSERT_CUDA(p.run(1, -1, y.data(), r));
        EXPECT_FALSE(differ_on_device(*ops, y.data(), big.data() + int64_t{r} * sh.n, sh.n))
            << "row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace detllm::kernels
