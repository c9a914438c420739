// The CUDA FP8 kernels (kernels/cuda/fp8_*.cu, docs/cuda.md "FP8"): the device E4M3 codec =
// the host codec (core/fp8.h) bit for bit; the per-row activation quantizer = the plain
// reference (fp8_reference.h) bit for bit on fp32 and bf16 rows, special rows included; the
// FP8 GEMM within its stated bound of the exact sum, for every tile configuration; every row
// of an m-row FP8 GEMM bit-identical to the same row of the largest batch, at every m from 1
// to 300 and under every tile configuration, to the row alone and to shuffled rows; a negative
// control (a K split chosen from m, fp8_test_kernels.cu) that the same check catches; the FP8
// KV append = the reference, appended in chunks = at once, and its dequantizing read.
// The FP8 wgmma GEMM (fp8_gemm_wg.cuh, CudaFp8Wg.*): the same bound and invariance checks,
// with its own bound and its own negative control (a promotion interval chosen from m), and
// that its bits are not the mma.sync kernel's (so the two are never switched by m).
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaFp8*' (skips without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fp8.h"
#include "cuda/cuda_test_util.h"
#include "cuda/fp8_reference.h"
#include "cuda/fp8_test_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_gemm_lt.h"
#include "kernels/cuda/fp8_gemm_wg_ws_raster.h"
#include "kernels/cuda/fp8_launch.h"
#include "kernels/cuda/fp8_rule.h"

namespace detllm::kernels {
namespace {

using cuda_testing::DeviceArray;
using cuda_testing::differ_on_device;

#define ASSERT_CUDA(expr)                                                  \
  do {                                                                     \
    const cudaError_t err_ = (expr);                                       \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

// The launchers run on the legacy default stream here; DeviceArray's own copies are on the ops'
// stream and complete before it returns, so one device-wide synchronize orders the two.
void sync() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

// Activation rows: normal values times a per-row magnitude (2^-12 … 2^12), a few outliers.
std::vector<float> activations(int32_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 999);
  std::vector<float> x(static_cast<size_t>(m) * k);
  for (int32_t r = 0; r < m; ++r) {
    const float mag = std::ldexp(1.0f, static_cast<int>(r % 25) - 12);
    for (int64_t i = 0; i < k; ++i) {
      float v = normal(rng) * mag;
      if (pick(rng) == 0) v *= 40.0f;
      x[static_cast<size_t>(r) * k + i] = v;
    }
  }
  return x;
}

// FP8 weights (n, k) with a scale per output channel: each row quantized like an activation
// row (amax / 448), from random values whose scale varies by row.
struct Fp8Weights {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
// first_half_gain: columns [0, k / 2) times it before quantizing (a wide dynamic range along
// k, where the order of the fp32 promotion adds matters; 1 elsewhere).
Fp8Weights weights(int64_t n, int64_t k, uint32_t seed, float first_half_gain = 1.0f) {
  const std::vector<float> f = cuda_testing::fast_random_floats(static_cast<size_t>(n * k), seed);
  Fp8Weights w{std::vector<uint8_t>(f.size()), std::vector<float>(static_cast<size_t>(n))};
  for (int64_t r = 0; r < n; ++r) {
    std::vector<float> row(f.begin() + r * k, f.begin() + (r + 1) * k);
    const float mag = 0.02f * (1.0f + static_cast<float>(r % 7));
    for (float& v : row) v *= mag;
    for (int64_t i = 0; i < k / 2; ++i) row[static_cast<size_t>(i)] *= first_half_gain;
    w.scales[r] = fp8_ref::quantize_row(row.data(), k, w.codes.data() + r * k);
  }
  return w;
}

TEST(CudaFp8, DeviceCodecIsTheHostCodec) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  std::vector<float> x;
  // Every bf16 pattern (every E4M3 tie and midpoint is one: 4 significant bits), each tie and
  // code value one float ulp either side, and random floats over the whole exponent range.
  for (uint32_t h = 0; h < 65536; ++h) {
    float f;
    const uint32_t bits = h << 16;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
    x.push_back(std::nextafter(f, std::numeric_limits<float>::infinity()));
    x.push_back(std::nextafter(f, -std::numeric_limits<float>::infinity()));
  }
  std::mt19937 rng(8);
  for (int i = 0; i < (1 << 20); ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
  }
  DeviceArray<float> dx(*ops, x);
  DeviceArray<uint8_t> codes(*ops, x.size());
  DeviceArray<float> values(*ops, 256);
  ASSERT_CUDA(cuda_testing::fp8_codec_on_device(dx.data(), static_cast<int64_t>(x.size()),
                                               codes.data(), values.data()));
  const auto got = codes.download();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < x.size(); ++i) {
    if (got[i] != float_to_fp8_e4m3(x[i])) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << "first at " << first << ": " << (first >= 0 ? x[first] : 0.0f);
  const auto dec = values.download();
  for (int c = 0; c < 256; ++c) {
    const float want = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(dec[c])) << "code " << c;
    } else {
      EXPECT_EQ(std::memcmp(&dec[c], &want, 4), 0) << "code " << c << ": " << dec[c] << " vs " << want;
    }
  }
}

// Scales and codes of the quantizer = the reference, bit for bit, on fp32 and on bf16 rows
// (random rows, a zero row, rows with NaN, ±inf-free huge and tiny rows, ragged k); a row
// quantized alone = in the batch.
TEST(CudaFp8, QuantizeRowsGivesTheReferenceBits) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  for (int64_t k : {int64_t{4096}, int64_t{14336}, int64_t{16}, int64_t{1000}}) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "k " << k << (bf16 ? " bf16" : " fp32"));
      const int32_t m = 40;
      std::vector<float> x = activations(m, k, static_cast<uint32_t>(k));
      std::fill(x.begin(), x.begin() + k, 0.0f);                        // row 0: zeros
      x[k + 3] = std::numeric_limits<float>::quiet_NaN();                // row 1: a NaN
      for (int64_t i = 0; i < k; ++i) x[2 * k + i] *= 1e30f;            // row 2: huge
      for (int64_t i = 0; i < k; ++i) x[3 * k + i] *= 1e-35f;           // row 3: tiny
      x[4 * k] = -0.0f;
      std::vector<uint16_t> xb;
      if (bf16) {
        xb = cuda_testing::to_bf16(x);
        for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_f32(xb[i]);  // what the kernel reads
      }
      std::vector<uint8_t> want_q(x.size());
      std::vector<float> want_s(m);
      for (int32_t r = 0; r < m; ++r)
        want_s[r] = fp8_ref::quantize_row(x.data() + r * k, k, want_q.data() + r * k);
      DeviceArray<float> xf(*ops, x);
      DeviceArray<uint16_t> xh(*ops, bf16 ? xb : std::vector<uint16_t>(1));
      const void* src = bf16 ? static_cast<const void*>(xh.data()) : xf.data();
      DeviceArray<uint8_t> q(*ops, x.size());
      DeviceArray<float> s(*ops, static_cast<size_t>(m));
      ASSERT_CUDA(cuda::launch_fp8_quantize_rows(src, bf16, m, k, q.data(), s.data(), nullptr));
      sync();
      const auto got_q = q.download();
      const auto got_s = s.download();
      EXPECT_EQ(std::memcmp(got_s.data(), want_s.data(), 4 * static_cast<size_t>(m)), 0);
      EXPECT_EQ(got_q, want_q);
      // Row 7 alone.
      const size_t esz = bf16 ? 2 : 4;
      ASSERT_CUDA(cuda::launch_fp8_quantize_rows(static_cast<const char*>(src) + 7 * k * esz, bf16,
                                                 1, k, q.data(), s.data(), nullptr));
      sync();
      const auto alone_q = q.download(static_cast<size_t>(k));
      EXPECT_EQ(s.download(1)[0], want_s[7]);
      EXPECT_TRUE(std::equal(alone_q.begin(), alone_q.end(), want_q.begin() + 7 * k));
    }
  }
}

// The two FP8 GEMM kernels: mma.sync (launch_fp8_gemm) and FP8 wgmma (launch_fp8_gemm_wg).
enum class Kernel { kMmaSync, kWgmma };
const char* name(Kernel k) { return k == Kernel::kWgmma ? "wgmma" : "mma.sync"; }
int variants(Kernel k) {
  return k == Kernel::kWgmma ? cuda::kFp8GemmWgVariants : cuda::kFp8GemmVariants;
}

// One problem on the device: activations quantized there (and checked against the
// reference), FP8 weights uploaded, the reference copies kept on the host.
struct Problem {
  int32_t m;
  int64_t n, k;
  std::vector<uint8_t> xq;
  std::vector<float> xs;
  Fp8Weights w;
  DeviceArray<uint8_t> d_xq, d_w;
  DeviceArray<float> d_xs, d_ws, d_y;
  Problem(Ops& ops, int32_t m_, int64_t n_, int64_t k_, uint32_t seed,
          float first_half_gain = 1.0f)
      : m(m_), n(n_), k(k_), xq(static_cast<size_t>(m_) * k_), xs(static_cast<size_t>(m_)),
        w(weights(n_, k_, seed + 1, first_half_gain)),
        d_xq(ops, xq.size()), d_w(ops, w.codes), d_xs(ops, xs.size()), d_ws(ops, w.scales),
        d_y(ops, static_cast<size_t>(m_) * n_) {
    std::vector<float> x = activations(m, k, seed);
    for (int32_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < k / 2; ++i) x[static_cast<size_t>(r * k + i)] *= first_half_gain;
    for (int32_t r = 0; r < m; ++r) xs[r] = fp8_ref::quantize_row(x.data() + r * k, k, xq.data() + r * k);
    d_xq.upload(xq);
    d_xs.upload(xs);
  }
  cudaError_t run(int32_t rows, int variant, float* y, int32_t first_row = 0,
                  const float* bias = nullptr, Kernel kernel = Kernel::kMmaSync) const {
    const auto launch =
        kernel == Kernel::kWgmma ? cuda::launch_fp8_gemm_wg : cuda::launch_fp8_gemm;
    return launch(d_xq.data() + int64_t{first_row} * k, d_xs.data() + first_row, rows, d_w.data(),
                  d_ws.data(), n, k, bias, y, variant, nullptr);
  }
};

// Every element within the kernel's stated bound of the exact sum (fp8_ref::gemm_tolerance,
// gemm_wg_tolerance), for every tile configuration (the default plan too), with a bias; the
// whole linear (quantizer + GEMM) = the two apart.
void check_gemm_bound(Kernel kernel) {
  auto ops = cuda_testing::invariant_ops();
  struct Shape {
    int32_t m;
    int64_t n, k;
  };
  // Ragged n, k = 16 (mod 32) and 528 (a half k32 group zero-filled), Llama's k = 4096 and 14336.
  for (const Shape& sh : {Shape{37, 256, 4096}, Shape{19, 37, 528}, Shape{5, 96, 14336},
                          Shape{130, 200, 16}}) {
    SCOPED_TRACE(::testing::Message() << "m " << sh.m << " n " << sh.n << " k " << sh.k);
    const Problem p(*ops, sh.m, sh.n, sh.k, 11);
    const std::vector<float> bias_h = cuda_testing::fast_random_floats(static_cast<size_t>(sh.n), 5);
    DeviceArray<float> bias(*ops, bias_h);
    double worst = 0;
    for (int v = -1; v < variants(kernel); ++v) {
      ASSERT_CUDA(p.run(sh.m, v, p.d_y.data(), 0, bias.data(), kernel));
      sync();
      const auto y = p.d_y.download();
      int64_t bad = 0;
      for (int32_t r = 0; r < sh.m; ++r)
        for (int64_t c = 0; c < sh.n; ++c) {
          const auto e = fp8_ref::gemm_element(p.xq.data() + r * sh.k, p.xs[r],
                                               p.w.codes.data() + c * sh.k, p.w.scales[c], sh.k,
                                               bias_h[c]);
          const double tol =
              kernel == Kernel::kWgmma
                  ? fp8_ref::gemm_wg_tolerance(e, p.xs[r], p.w.scales[c], sh.k)
                  : fp8_ref::gemm_tolerance(e, p.xs[r], p.w.scales[c], sh.k);
          const double err = std::fabs(double(y[r * sh.n + c]) - e.value);
          worst = std::max(worst, err / tol);
          if (!(err <= tol) && bad++ < 3)
            ADD_FAILURE() << "variant " << v << " (" << r << ", " << c << "): " << y[r * sh.n + c]
                          << " vs exact " << e.value << ", bound " << tol;
        }
      EXPECT_EQ(bad, 0) << "variant " << v;
    }
    std::printf("  [fp8 gemm %s] m %d n %lld k %lld: worst error %.3g of the bound\n",
                name(kernel), sh.m, static_cast<long long>(sh.n), static_cast<long long>(sh.k),
                worst);
    // The linear: quantize (into scratch) then GEMM = the same bits as the two launched apart.
    const std::vector<float> x = activations(sh.m, sh.k, 11);
    DeviceArray<float> dx(*ops, x);
    DeviceArray<uint8_t> xq(*ops, x.size());
    DeviceArray<float> xs(*ops, static_cast<size_t>(sh.m));
    DeviceArray<float> y2(*ops, static_cast<size_t>(sh.m) * sh.n);
    const auto linear =
        kernel == Kernel::kWgmma ? cuda::launch_fp8_linear_wg : cuda::launch_fp8_linear;
    ASSERT_CUDA(linear(dx.data(), false, sh.m, p.d_w.data(), p.d_ws.data(), sh.n, sh.k,
                       bias.data(), y2.data(), xq.data(), xs.data(), -1, nullptr));
    ASSERT_CUDA(p.run(sh.m, -1, p.d_y.data(), 0, bias.data(), kernel));
    sync();
    EXPECT_EQ(xq.download(), p.xq);
    const auto a = y2.download(), b = p.d_y.download();
    EXPECT_BITS_EQ(a.data(), b.data(), static_cast<int64_t>(a.size()));
  }
}

TEST(CudaFp8, GemmIsWithinTheStatedBoundOfTheExactSum) {
  DETLLM_SKIP_WITHOUT_GPU();
  check_gemm_bound(Kernel::kMmaSync);
}
TEST(CudaFp8Wg, GemmIsWithinTheStatedBoundOfTheExactSum) {
  DETLLM_SKIP_WITHOUT_GPU();
  check_gemm_bound(Kernel::kWgmma);
}

constexpr int32_t kMaxM = 300;

// Rows [0, m) of the GEMM at m rows against the same rows of the kMaxM-row GEMM (device
// comparison) for each m in `ms`; returns the m whose rows differ.
template <class Launch>
std::vector<int32_t> ms_unlike_largest(Ops& ops, const Problem& p, const std::vector<int32_t>& ms,
                                       Launch&& launch) {
  DeviceArray<float> big(ops, static_cast<size_t>(kMaxM) * p.n);
  DeviceArray<float> y(ops, static_cast<size_t>(kMaxM) * p.n);
  EXPECT_EQ(launch(kMaxM, big.data()), cudaSuccess);
  std::vector<int32_t> bad;
  for (int32_t m : ms) {
    EXPECT_EQ(launch(m, y.data()), cudaSuccess);
    if (differ_on_device(ops, y.data(), big.data(), int64_t{m} * p.n)) bad.push_back(m);
  }
  return bad;
}

std::vector<int32_t> every_m() {
  std::vector<int32_t> ms(kMaxM);
  std::iota(ms.begin(), ms.end(), 1);
  return ms;
}

// The invariance: on a ragged shape and on every Llama-3.1-8B projection, rows of an m-row GEMM
// = the same rows of the 300-row GEMM (every m 1…300 on the small shapes; every m ≤ 64 and
// each plan edge of either kernel on the large ones), every tile configuration at 300 rows =
// the default plan, each row alone = in the batch, and shuffled rows = the rows shuffled.
void check_rows_equal_row_alone(Kernel kernel) {
  auto ops = cuda_testing::invariant_ops();
  std::vector<int32_t> edges(64);
  std::iota(edges.begin(), edges.end(), 1);
  for (int32_t m : {65, 100, 127, 128, 129, 200, 255, 256, 257, 299}) edges.push_back(m);
  struct Shape {
    const char* name;
    int64_t n, k;
    bool every;
  };
  for (const Shape& sh : {Shape{"ragged", 37, 528, true}, Shape{"o", 4096, 4096, true},
                          Shape{"qkv", 6144, 4096, false}, Shape{"gate_up", 28672, 4096, false},
                          Shape{"down", 4096, 14336, false}}) {
    SCOPED_TRACE(sh.name);
    const Problem p(*ops, kMaxM, sh.n, sh.k, 3);
    const auto bad =
        ms_unlike_largest(*ops, p, sh.every ? every_m() : edges, [&](int32_t m, float* y) {
          return p.run(m, -1, y, 0, nullptr, kernel);
        });
    EXPECT_TRUE(bad.empty()) << bad.size() << " row counts differ, first m = " << bad.front();
    // Every tile configuration at kMaxM rows.
    DeviceArray<float> ref(*ops, static_cast<size_t>(kMaxM) * sh.n);
    ASSERT_CUDA(p.run(kMaxM, -1, ref.data(), 0, nullptr, kernel));
    for (int v = 0; v < variants(kernel); ++v) {
      ASSERT_CUDA(p.run(kMaxM, v, p.d_y.data(), 0, nullptr, kernel));
      EXPECT_FALSE(differ_on_device(*ops, p.d_y.data(), ref.data(), int64_t{kMaxM} * sh.n))
          << "variant " << v;
    }
    // Rows alone (a few, every configuration's first and last rows among them).
    for (int32_t r : {0, 15, 16, 63, 64, 127, 128, 250, kMaxM - 1}) {
      ASSERT_CUDA(p.run(1, -1, p.d_y.data(), r, nullptr, kernel));
      EXPECT_FALSE(differ_on_device(*ops, p.d_y.data(), ref.data() + int64_t{r} * sh.n, sh.n))
          << "row " << r;
    }
    // Shuffled rows.
    std::vector<int32_t> perm(kMaxM);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
    std::vector<uint8_t> xq2(p.xq.size());
    std::vector<float> xs2(p.xs.size());
    for (int32_t r = 0; r < kMaxM; ++r) {
      std::copy_n(p.xq.begin() + int64_t{perm[r]} * sh.k, sh.k, xq2.begin() + int64_t{r} * sh.k);
      xs2[r] = p.xs[perm[r]];
    }
    DeviceArray<uint8_t> d_xq2(*ops, xq2);
    DeviceArray<float> d_xs2(*ops, xs2);
    const auto launch =
        kernel == Kernel::kWgmma ? cuda::launch_fp8_gemm_wg : cuda::launch_fp8_gemm;
    ASSERT_CUDA(launch(d_xq2.data(), d_xs2.data(), kMaxM, p.d_w.data(), p.d_ws.data(), sh.n, sh.k,
                       nullptr, p.d_y.data(), -1, nullptr));
    sync();
    const auto shuffled = p.d_y.download();
    const auto straight = ref.download();
    int32_t moved = 0;
    for (int32_t r = 0; r < kMaxM; ++r)
      moved += std::memcmp(shuffled.data() + int64_t{r} * sh.n,
                           straight.data() + int64_t{perm[r]} * sh.n, 4 * sh.n) != 0;
    EXPECT_EQ(moved, 0) << "shuffled rows that differ";
    std::printf("  [fp8 gemm %s invariance] %s %lldx%lld: %zu row counts checked, %zu differ\n",
                name(kernel), sh.name, static_cast<long long>(sh.n), static_cast<long long>(sh.k),
                (sh.every ? every_m() : edges).size(), bad.size());
  }
}

TEST(CudaFp8, GemmRowsEqualTheRowAloneAtEveryM) {
  DETLLM_SKIP_WITHOUT_GPU();
  check_rows_equal_row_alone(Kernel::kMmaSync);
}
TEST(CudaFp8Wg, GemmRowsEqualTheRowAloneAtEveryM) {
  DETLLM_SKIP_WITHOUT_GPU();
  check_rows_equal_row_alone(Kernel::kWgmma);
}

// The negative control: the same GEMM with its K range cut in two chains when m > 64 (a split
// chosen from the batch size). The check above must see rows change past m = 64.
TEST(CudaFp8, NegativeControlSplitByMIsCaught) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  const Problem p(*ops, kMaxM, 4096, 4096, 3);
  const auto bad = ms_unlike_largest(*ops, p, every_m(), [&](int32_t m, float* y) {
    return cuda_testing::launch_fp8_gemm_split_by_m(p.d_xq.data(), p.d_xs.data(), m, p.d_w.data(),
                                                    p.d_ws.data(), p.n, p.k, y);
  });
  std::printf("  [fp8 gemm control] K split for m > 64: %zu of %d row counts differ\n", bad.size(),
              kMaxM);
  EXPECT_FALSE(bad.empty()) << "the control matched: the invariance check cannot fail";
  EXPECT_TRUE(std::all_of(bad.begin(), bad.end(), [](int32_t m) { return m <= 64; }))
      << "(the control's largest batch is split, so it is the small m that differ)";
}

// The wgmma kernel's negative control: its partial sums promoted every 256 k instead of 128
// when m > 64 (an interval chosen from the batch size). The invariance check must see it.
TEST(CudaFp8Wg, NegativeControlPromotionByMIsCaught) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  const Problem p(*ops, kMaxM, 4096, 4096, 3);
  const auto bad = ms_unlike_largest(*ops, p, every_m(), [&](int32_t m, float* y) {
    return cuda_testing::launch_fp8_gemm_wg_promote_by_m(p.d_xq.data(), p.d_xs.data(), m,
                                                         p.d_w.data(), p.d_ws.data(), p.n, p.k, y);
  });
  std::printf("  [fp8 wgmma control] promotion every 256 k for m > 64: %zu of %d row counts "
              "differ\n", bad.size(), kMaxM);
  EXPECT_FALSE(bad.empty()) << "the control matched: the invariance check cannot fail";
  EXPECT_TRUE(std::all_of(bad.begin(), bad.end(), [](int32_t m) { return m <= 64; }));
}

// The two FP8 kernels are two numerics: on the same problem their outputs differ (the wgmma's
// ~14-bit accumulator inside each 128-k block vs the f16 HMMA's fp32 chain), which is why the
// engine may not choose between them by m. If they ever agreed bit for bit, docs/cuda.md's
// "one kernel per model, never switched by m" could be relaxed; this test would say so.
TEST(CudaFp8Wg, IsNotTheMmaSyncKernelsBits) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  const Problem p(*ops, 64, 4096, 4096, 3);
  DeviceArray<float> a(*ops, size_t{64} * 4096);
  ASSERT_CUDA(p.run(64, -1, a.data(), 0, nullptr, Kernel::kMmaSync));
  ASSERT_CUDA(p.run(64, -1, p.d_y.data(), 0, nullptr, Kernel::kWgmma));
  sync();
  const auto x = a.download(), y = p.d_y.download();
  int64_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += std::memcmp(&x[i], &y[i], 4) != 0;
  std::printf("  [fp8 wgmma vs mma.sync] 64x4096x4096: %lld of %zu elements differ\n",
              static_cast<long long>(differ), x.size());
  EXPECT_GT(differ, 0);
}

// The cuBLASLt FP8 fast path (fp8_gemm_lt.h): every element within the wgmma kernel's bound of
// the exact sum, the per-row and per-channel scales applied to the right rows and columns
// (they vary by row and channel here), at a decode and a prefill m.
TEST(CudaFp8Lt, GemmIsWithinTheWgmmaBoundOfTheExactSum) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  cuda::Fp8LtGemm lt;
  struct Shape {
    int32_t m;
    int64_t n, k;
  };
  for (const Shape& sh : {Shape{1, 256, 4096}, Shape{200, 384, 1024}, Shape{37, 96, 528}}) {
    SCOPED_TRACE(::testing::Message() << "m " << sh.m << " n " << sh.n << " k " << sh.k);
    const Problem p(*ops, sh.m, sh.n, sh.k, 13);
    const cublasStatus_t st = lt.run(p.d_xq.data(), p.d_xs.data(), sh.m, p.d_w.data(),
                                     p.d_ws.data(), sh.n, sh.k, p.d_y.data(), nullptr);
    ASSERT_EQ(st, CUBLAS_STATUS_SUCCESS) << cublasGetStatusString(st);
    sync();
    const auto y = p.d_y.download();
    double worst = 0;
    int64_t bad = 0;
    for (int32_t r = 0; r < sh.m; ++r)
      for (int64_t c = 0; c < sh.n; ++c) {
        const auto e = fp8_ref::gemm_element(p.xq.data() + r * sh.k, p.xs[r],
                                             p.w.codes.data() + c * sh.k, p.w.scales[c], sh.k, 0.0f);
        const double tol = fp8_ref::gemm_wg_tolerance(e, p.xs[r], p.w.scales[c], sh.k);
        const double err = std::fabs(double(y[r * sh.n + c]) - e.value);
        worst = std::max(worst, err / tol);
        if (!(err <= tol) && bad++ < 3)
          ADD_FAILURE() << "(" << r << ", " << c << "): " << y[r * sh.n + c] << " vs exact "
                        << e.value << ", bound " << tol;
      }
    EXPECT_EQ(bad, 0);
    std::printf("  [fp8 cublaslt] m %d n %lld k %lld: worst error %.3g of the wgmma bound\n", sh.m,
                static_cast<long long>(sh.n), static_cast<long long>(sh.k), worst);
  }
}

// The FP8 KV append: codes = the reference bit for bit (values past 448·scale saturate), the
// slots outside the cache untouched, tokens appended in chunks of 7 = all at once, and the
// dequantizing read = dec(code)·scale.
TEST(CudaFp8, KvAppendRoundsOnceAndReadsBack) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  const int32_t n_tokens = 50, heads = 8, hd = 128;
  const int64_t row = int64_t{heads} * hd, n_slots = 64;
  std::vector<float> k = activations(n_tokens, row, 21), v = activations(n_tokens, row, 22);
  k[5] = 1e9f;  // saturates
  v[7] = -std::numeric_limits<float>::infinity();
  std::vector<float> ks(heads), vs(heads);
  for (int h = 0; h < heads; ++h) {
    ks[h] = 0.01f * static_cast<float>(h + 1);
    vs[h] = 0.003f * static_cast<float>(2 * h + 1);
  }
  std::vector<int32_t> slots(n_tokens);
  std::iota(slots.begin(), slots.end(), 10);
  std::shuffle(slots.begin(), slots.end(), std::mt19937(3));
  slots[4] = -1;  // skipped
  std::vector<uint8_t> want_k(static_cast<size_t>(n_slots * row), 0xAB), want_v = want_k;
  for (int32_t t = 0; t < n_tokens; ++t) {
    if (slots[t] < 0) continue;
    for (int64_t e = 0; e < row; ++e) {
      want_k[slots[t] * row + e] = fp8_ref::kv_code(k[t * row + e], ks[e / hd]);
      want_v[slots[t] * row + e] = fp8_ref::kv_code(v[t * row + e], vs[e / hd]);
    }
  }
  DeviceArray<float> dk(*ops, k), dv(*ops, v), dks(*ops, ks), dvs(*ops, vs);
  DeviceArray<int32_t> dslots(*ops, slots);
  const std::vector<uint8_t> fill(static_cast<size_t>(n_slots * row), 0xAB);
  for (int32_t chunk : {n_tokens, 7}) {
    SCOPED_TRACE(::testing::Message() << "chunks of " << chunk);
    DeviceArray<uint8_t> ck(*ops, fill), cv(*ops, fill);
    for (int32_t t0 = 0; t0 < n_tokens; t0 += chunk) {
      const int32_t c = std::min(chunk, n_tokens - t0);
      ASSERT_CUDA(cuda::launch_kv_append_fp8(dk.data() + t0 * row, dv.data() + t0 * row,
                                             dslots.data() + t0, c, heads, hd, n_slots, dks.data(),
                                             dvs.data(), ck.data(), cv.data(), nullptr));
    }
    sync();
    EXPECT_EQ(ck.download(), want_k);
    EXPECT_EQ(cv.download(), want_v);
    // The read of every appended token's K.
    DeviceArray<float> out(*ops, static_cast<size_t>(n_tokens * row));
    ASSERT_CUDA(cuda::launch_kv_read_fp8(ck.data(), dks.data(), dslots.data(), n_tokens, heads, hd,
                                         n_slots, out.data(), nullptr));
    sync();
    const auto got = out.download();
    for (int32_t t = 0; t < n_tokens; ++t) {
      for (int64_t e = 0; e < row; ++e) {
        const float g = got[t * row + e];
        if (slots[t] < 0) {
          ASSERT_TRUE(std::isnan(g)) << "token " << t;
          continue;
        }
        const float want = fp8_ref::kv_value(want_k[slots[t] * row + e], ks[e / hd]);
        ASSERT_EQ(std::memcmp(&g, &want, 4), 0) << "token " << t << " element " << e;
      }
    }
  }
}

// ---- The FP8 wgmma GEMM with a fixed k split (fp8_gemm_wg_split.cuh, CudaFp8WgSplit.*) ----

// y of the split launcher on problem p (all rows from first_row), a workspace for kMaxM rows
// and the in-kernel fold's tile counts (zeros).
struct SplitRunner {
  const Problem& p;
  int splits;
  DeviceArray<float> ws;
  DeviceArray<uint32_t> tiles;
  SplitRunner(Ops& ops, const Problem& p_, int splits_)
      : p(p_), splits(splits_),
        ws(ops, cuda::fp8_gemm_wg_split_workspace(kMaxM, p_.n, p_.k, splits_)),
        tiles(ops, std::vector<uint32_t>(cuda::fp8_gemm_wg_split_tiles(kMaxM, p_.n), 0u)) {}
  cudaError_t run(int32_t rows, int variant, float* y, int32_t first_row = 0,
                  const float* bias = nullptr) const {
    return cuda::launch_fp8_gemm_wg_split(p.d_xq.data() + int64_t{first_row} * p.k,
                                          p.d_xs.data() + first_row, rows, p.d_w.data(),
                                          p.d_ws.data(), p.n, p.k, bias, y, splits, ws.data(),
                                          ws.size(), variant, nullptr, tiles.data());
  }
};

// Round-to-nearest fp32 operations the compiler may not fuse or reorder.
float add_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
float mul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}

// The per-shape split rule (CudaOptions::fp8_wg_splits = -1, the default) on Llama-3.1-8B's shapes and an
// H100's 132 SMs: a function of n and the SMs alone (host code: runs without a GPU).
TEST(CudaFp8WgSplit, AutoSplitsFollowTheShapeAndTheDevice) {
  EXPECT_EQ(cuda::fp8_gemm_wg_auto_splits(4096, 4096, 132), 4);    // o: 32 column blocks
  EXPECT_EQ(cuda::fp8_gemm_wg_auto_splits(4096, 14336, 132), 4);   // down
  EXPECT_EQ(cuda::fp8_gemm_wg_auto_splits(6144, 4096, 132), 2);    // qkv: 48
  EXPECT_EQ(cuda::fp8_gemm_wg_auto_splits(28672, 4096, 132), 1);   // gate_up: 224 fill them
  EXPECT_EQ(cuda::fp8_gemm_wg_auto_splits(4096, 4096, 128), 4);    // one wave exactly
  EXPECT_EQ(cuda::fp8_gemm_wg_auto_splits(4096, 4096, 127), 3);
  EXPECT_EQ(cuda::fp8_gemm_wg_auto_splits(128, 4096, 132), cuda::kFp8GemmWgSplitAutoMax);
  EXPECT_EQ(cuda::fp8_gemm_wg_auto_splits(4096, 4096, 0), 1);
  EXPECT_EQ(cuda_fp8_gemm_rule(-1), cuda_fp8_gemm_rule());  // the default: per shape
  EXPECT_NE(cuda_fp8_gemm_rule(-1), cuda_fp8_gemm_rule(1));
}

// The TMA-fed kernel's tile order (host code: runs without a GPU): every output tile made by
// exactly one CTA, for row-tile counts below, at and past a raster group, and a group's CTAs on
// its own row tiles, column-major.
TEST(CudaFp8WgSplit, TmaKernelsTileOrderCoversEveryTileOnce) {
  for (int tiles_m : {1, 3, 8, 9, 16, 17, 32}) {
    for (int tiles_n : {1, 2, 48, 224}) {
      std::vector<int> seen(static_cast<size_t>(tiles_m * tiles_n), 0);
      for (int i = 0; i < tiles_m * tiles_n; ++i) {
        int tm = -1, tn = -1;
        cuda::fp8::ws::raster(i, tiles_m, tiles_n, tm, tn);
        ASSERT_TRUE(tm >= 0 && tm < tiles_m && tn >= 0 && tn < tiles_n)
            << i << " of " << tiles_m << "x" << tiles_n << " → (" << tm << ", " << tn << ")";
        ++seen[static_cast<size_t>(tm * tiles_n + tn)];
        EXPECT_EQ(tm / cuda::fp8::ws::kRasterRows, i / (cuda::fp8::ws::kRasterRows * tiles_n));
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), tiles_m * tiles_n)
          << tiles_m << "x" << tiles_n;
    }
  }
  int tm = -1, tn = -1;
  cuda::fp8::ws::raster(1, 32, 224, tm, tn);  // the second CTA: the next row tile, same column
  EXPECT_EQ(tm, 1);
  EXPECT_EQ(tn, 0);
}

// One run is the whole kernel: splits = 1 gives launch_fp8_gemm_wg's bits in every variant.
TEST(CudaFp8WgSplit, OneRunIsTheWholeKernel) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  for (int32_t m : {1, 37, 130}) {
    SCOPED_TRACE(::testing::Message() << "m " << m);
    const Problem p(*ops, m, 384, 4096, 17);
    DeviceArray<float> whole(*ops, static_cast<size_t>(m) * p.n);
    ASSERT_CUDA(p.run(m, -1, whole.data(), 0, nullptr, Kernel::kWgmma));
    const SplitRunner split(*ops, p, 1);
    for (int v = -1; v < cuda::kFp8GemmWgSplitVariants; ++v) {
      ASSERT_CUDA(split.run(m, v, p.d_y.data()));
      EXPECT_FALSE(differ_on_device(*ops, p.d_y.data(), whole.data(), int64_t{m} * p.n))
          << "variant " << v;
    }
  }
}

// The in-kernel fold (variant 0) against the combining launch (3) over many launches in a row
// on one set of tile counts: the same bits each time (a count left non-zero would make the
// next launch's first CTA of that tile fold too early, with runs missing), the counts all zero
// after, and variant 0 refused without counts.
TEST(CudaFp8WgSplit, InKernelFoldLeavesItsCountsAtZero) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  const Problem p(*ops, 64, 4096, 4096, 31);
  const SplitRunner split(*ops, p, 5);
  DeviceArray<float> want(*ops, static_cast<size_t>(p.m) * p.n);
  for (int32_t m : {1, 7, 64, 2, 64, 1}) {
    SCOPED_TRACE(::testing::Message() << "m " << m);
    ASSERT_CUDA(split.run(m, 3, want.data()));
    for (int rep = 0; rep < 3; ++rep) {
      ASSERT_CUDA(split.run(m, 0, p.d_y.data()));
      EXPECT_FALSE(differ_on_device(*ops, p.d_y.data(), want.data(), int64_t{m} * p.n));
    }
  }
  sync();
  const auto counts = split.tiles.download();
  EXPECT_EQ(std::count(counts.begin(), counts.end(), 0u), static_cast<long>(counts.size()));
  EXPECT_EQ(cuda::launch_fp8_gemm_wg_split(p.d_xq.data(), p.d_xs.data(), 1, p.d_w.data(),
                                           p.d_ws.data(), p.n, p.k, nullptr, p.d_y.data(), 5,
                                           split.ws.data(), split.ws.size(), 0, nullptr, nullptr),
            cudaErrorInvalidValue);
}

// The definition, bit for bit: run z's chain is the whole kernel's result on that run's k
// columns alone with unit scales (its epilogue multiplies by 1: exact), and the split result is
// those chains added in ascending z on the host, then · x_scale · w_scale + bias.
TEST(CudaFp8WgSplit, RunsAreTheWholeKernelsChainsAddedInOrder) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  const int32_t m = 37;
  for (int splits : {2, 3, 5}) {
    SCOPED_TRACE(::testing::Message() << "splits " << splits);
    const Problem p(*ops, m, 200, 4096 + 528, 19);  // 37 tiles, the last one partial
    const int32_t runs = cuda::fp8_gemm_wg_split_runs(p.k, splits);
    const int64_t tiles = (p.k + 127) / 128, per = (tiles + runs - 1) / runs;
    ASSERT_EQ((tiles + per - 1) / per, runs);
    std::vector<std::vector<float>> chains;
    const std::vector<float> ones_m(m, 1.0f), ones_n(p.n, 1.0f);
    DeviceArray<float> d_ones_m(*ops, ones_m), d_ones_n(*ops, ones_n);
    for (int32_t z = 0; z < runs; ++z) {
      const int64_t k0 = z * per * 128, k1 = std::min<int64_t>((z + 1) * per * 128, p.k);
      const int64_t kz = k1 - k0;
      std::vector<uint8_t> xz(static_cast<size_t>(m) * kz), wz(static_cast<size_t>(p.n) * kz);
      for (int32_t r = 0; r < m; ++r)
        std::copy_n(p.xq.begin() + r * p.k + k0, kz, xz.begin() + r * kz);
      for (int64_t c = 0; c < p.n; ++c)
        std::copy_n(p.w.codes.begin() + c * p.k + k0, kz, wz.begin() + c * kz);
      DeviceArray<uint8_t> d_xz(*ops, xz), d_wz(*ops, wz);
      DeviceArray<float> yz(*ops, static_cast<size_t>(m) * p.n);
      ASSERT_CUDA(cuda::launch_fp8_gemm_wg(d_xz.data(), d_ones_m.data(), m, d_wz.data(),
                                           d_ones_n.data(), p.n, kz, nullptr, yz.data(), -1,
                                           nullptr));
      sync();
      chains.push_back(yz.download());
    }
    const std::vector<float> bias_h = cuda_testing::fast_random_floats(static_cast<size_t>(p.n), 7);
    DeviceArray<float> bias(*ops, bias_h);
    const SplitRunner split(*ops, p, splits);
    for (int v = -1; v < cuda::kFp8GemmWgSplitVariants; ++v) {
      ASSERT_CUDA(split.run(m, v, p.d_y.data(), 0, bias.data()));
      sync();
      const auto y = p.d_y.download();
      int64_t bad = 0;
      for (int32_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < p.n; ++c) {
          const size_t i = static_cast<size_t>(r * p.n + c);
          float sum = chains[0][i];
          for (int32_t z = 1; z < runs; ++z) sum = add_rn(sum, chains[z][i]);
          const float want = add_rn(mul_rn(mul_rn(sum, p.xs[r]), p.w.scales[c]), bias_h[c]);
          if (std::memcmp(&want, &y[i], 4) != 0 && bad++ < 3)
            ADD_FAILURE() << "variant " << v << " (" << r << ", " << c << "): " << y[i]
                          << " vs the chains' " << want;
        }
      EXPECT_EQ(bad, 0) << "variant " << v;
    }
  }
}

// The TMA-fed warp-specialised kernel (variant 4, fp8_gemm_wg_ws.cuh) against the cp.async
// 128-row tiles (variant 2): the same bits at m around the tile edges and past one raster group
// (8 row tiles), with k ragged (a last tile past k) and n ragged (a last column tile past n), on
// one run and on three; every element written (the output starts as NaN each time).
TEST(CudaFp8WgSplit, TmaWarpSpecialisedGivesTheCpAsyncTilesBits) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  const Problem p(*ops, 1100, 200, 4096 + 528, 41);
  DeviceArray<float> want(*ops, static_cast<size_t>(p.m) * p.n);
  DeviceArray<float> got(*ops, static_cast<size_t>(p.m) * p.n);
  for (int splits : {1, 3}) {
    const SplitRunner split(*ops, p, splits);
    for (int32_t m : {65, 127, 128, 129, 1024, 1025, 1100}) {
      SCOPED_TRACE(::testing::Message() << "splits " << splits << ", m " << m);
      ASSERT_CUDA(split.run(m, 2, want.data()));
      ASSERT_EQ(cudaMemset(got.data(), 0xFF, sizeof(float) * got.size()), cudaSuccess);
      ASSERT_CUDA(split.run(m, 4, got.data()));
      EXPECT_FALSE(differ_on_device(*ops, got.data(), want.data(), int64_t{m} * p.n));
    }
  }
}

// Within the wgmma kernel's bound of the exact sum.
TEST(CudaFp8WgSplit, IsWithinTheWgmmaBoundOfTheExactSum) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  const Problem p(*ops, 19, 256, 14336, 23);
  const SplitRunner split(*ops, p, 4);
  ASSERT_CUDA(split.run(p.m, -1, p.d_y.data()));
  sync();
  const auto y = p.d_y.download();
  double worst = 0;
  int64_t bad = 0;
  for (int32_t r = 0; r < p.m; ++r)
    for (int64_t c = 0; c < p.n; ++c) {
      const auto e = fp8_ref::gemm_element(p.xq.data() + r * p.k, p.xs[r],
                                           p.w.codes.data() + c * p.k, p.w.scales[c], p.k, 0.0f);
      const double tol = fp8_ref::gemm_wg_tolerance(e, p.xs[r], p.w.scales[c], p.k);
      const double err = std::fabs(double(y[r * p.n + c]) - e.value);
      worst = std::max(worst, err / tol);
      bad += !(err <= tol);
    }
  EXPECT_EQ(bad, 0);
  std::printf("  [fp8 wgmma split 4] m 19 n 256 k 14336: worst error %.3g of the bound\n", worst);
}

// The invariance at a fixed split: rows of every m (1…300 on o and a ragged shape, m ≤ 64 and
// the edges on down) = the rows of the 300-row GEMM — m ≤ 64 run the runs in CTAs of their own,
// larger m one after the other in each CTA — every variant at 300 rows the same, a row alone
// the same.
TEST(CudaFp8WgSplit, RowsEqualTheRowAloneAtEveryM) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  std::vector<int32_t> edges(64);
  std::iota(edges.begin(), edges.end(), 1);
  for (int32_t m : {65, 128, 129, 256, 299}) edges.push_back(m);
  struct Shape {
    const char* name;
    int64_t n, k;
    bool every;
    int splits;
  };
  for (const Shape& sh : {Shape{"ragged", 37, 528, true, 3}, Shape{"o", 4096, 4096, true, 4},
                          Shape{"down", 4096, 14336, false, 4}, Shape{"qkv", 6144, 4096, false, 3}}) {
    SCOPED_TRACE(sh.name);
    const Problem p(*ops, kMaxM, sh.n, sh.k, 29);
    const SplitRunner split(*ops, p, sh.splits);
    const auto bad = ms_unlike_largest(*ops, p, sh.every ? every_m() : edges,
                                       [&](int32_t m, float* y) { return split.run(m, -1, y); });
    EXPECT_TRUE(bad.empty()) << bad.size() << " row counts differ, first m = " << bad.front();
    DeviceArray<float> ref(*ops, static_cast<size_t>(kMaxM) * sh.n);
    ASSERT_CUDA(split.run(kMaxM, -1, ref.data()));
    for (int v = 0; v < cuda::kFp8GemmWgSplitVariants; ++v) {
      ASSERT_CUDA(split.run(kMaxM, v, p.d_y.data()));
      EXPECT_FALSE(differ_on_device(*ops, p.d_y.data(), ref.data(), int64_t{kMaxM} * sh.n))
          << "variant " << v;
    }
    for (int32_t r : {0, 63, 64, 250, kMaxM - 1}) {
      ASSERT_CUDA(split.run(1, -1, p.d_y.data(), r));
      EXPECT_FALSE(differ_on_device(*ops, p.d_y.data(), ref.data() + int64_t{r} * sh.n, sh.n))
          << "row " << r;
    }
    std::printf("  [fp8 wgmma split %d invariance] %s %lldx%lld: %zu row counts checked, %zu "
                "differ\n", sh.splits, sh.name, static_cast<long long>(sh.n),
                static_cast<long long>(sh.k), (sh.every ? every_m() : edges).size(), bad.size());
  }
}

// The negative control: the split chosen from m (one run above 64 rows, two at or below) —
// what a planner that picked split-K by batch size would do. The check above must see it.
// On data of one scale the partial sums of the 128-k blocks (≈14 significant bits each, the
// wgmma accumulator) add exactly in fp32 in any order, so the split changes no bit there (seen
// on an H100: 0 of 300 row counts differ). Here the first half of k is 2^12 larger in its
// products (x and w each × 64 before quantizing): the small blocks' bits fall below the running
// sum's 24, each add rounds, and the order of the adds shows.
TEST(CudaFp8WgSplit, NegativeControlSplitsChosenByMAreCaught) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_testing::invariant_ops();
  const Problem p(*ops, kMaxM, 4096, 4096, 3, /*first_half_gain=*/64.0f);
  const SplitRunner two(*ops, p, 2), one(*ops, p, 1);
  const auto bad = ms_unlike_largest(*ops, p, every_m(), [&](int32_t m, float* y) {
    return (m > 64 ? one : two).run(m, -1, y);
  });
  std::printf("  [fp8 wgmma split control] 2 runs for m <= 64, 1 above: %zu of %d row counts "
              "differ\n", bad.size(), kMaxM);
  EXPECT_FALSE(bad.empty()) << "the control matched: the invariance check cannot fail";
}

}  // namespace
}  // namespace detllm::kernels
