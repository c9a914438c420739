// The FP8 linear layer (kernels/ref/fp8_linear.h): its definition against an independent
// computation in torch + numpy (tests/data/fp8/linear_golden.json, scripts/ref/fp8_checkpoints.py:
// torch's float8 casts, a sequential fp32 sum) bit for bit — per-channel and 128-block weight
// scales, dynamic, static and bounded activation scales, an all-zero row, saturation; the
// per-(token, 128-column) activation scales of transformers' fp8 (kF8E4M3G128) — and the
// CPU kernel (kernels/cpu/matmul_fp8.cpp, through make_cpu_ops) against the definition bit for
// bit for m = 1…19, n not a multiple of the 8 lanes, partial 128-blocks, rows of a fused matrix
// with different static scales, 1–3 threads; each row's bits are the same whatever the other
// rows of the call (batch invariance). A per-tensor dynamic scale over the batch — the scheme
// refused at load — is shown to break that.
// Run: build/tests/test_kernels --gtest_filter='Fp8*'.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/fp8_linear.h"

namespace detllm::kernels {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// rows × cols FP8 rows: random codes (no NaN), random positive scales, the given activation
// scheme per row (in_scale[r % size], bound).
std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t cols, uint32_t seed,
                                 std::vector<float> in_scale = {0.0f}, float bound = 0.0f) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> scale(1e-3f, 4e-3f);
  const int64_t rb = dtype_row_bytes(t, cols), n_w = fp8_row_scales(t, cols) - 2;
  std::vector<uint8_t> out(static_cast<size_t>(rows * rb));
  std::vector<float> ws(static_cast<size_t>(n_w));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& s : ws) s = scale(rng);
    uint8_t* row = out.data() + r * rb;
    fp8_write_row_header(t, row, cols, in_scale[static_cast<size_t>(r) % in_scale.size()], bound,
                         ws.data());
    uint8_t* c = row + 4 * (n_w + 2);
    for (int64_t k = 0; k < cols; ++k) {
      int v = code(rng);
      if ((v & 0x7f) == 0x7f) v &= 0xfe;  // no NaN
      c[k] = static_cast<uint8_t>(v);
    }
  }
  return out;
}

// The golden cases of `file` (tests/data/fp8/): ref::fp8_linear and the CPU backend give
// torch's bits.
void expect_golden(const char* file, size_t min_cases) {
  const auto path = std::filesystem::path(DETLLM_SOURCE_DIR) / "tests/data/fp8" / file;
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  const auto g = nlohmann::json::parse(in);
  ASSERT_GE(g["cases"].size(), min_cases);
  for (const auto& c : g["cases"]) {
    const int64_t m = c["m"], n = c["n"], k = c["k"];
    const DType t = c.value("groups", false) ? DType::kF8E4M3G128
                    : c["blocks"].get<bool>() ? DType::kF8E4M3B128
                                              : DType::kF8E4M3;
    SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k << " "
                                    << dtype_name(t));
    std::vector<float> x;
    for (uint32_t b : c["x"].get<std::vector<uint32_t>>()) x.push_back(from_bits(b));
    const auto codes = c["codes"].get<std::vector<uint8_t>>();
    std::vector<float> ws;
    for (uint32_t b : c["weight_scales"].get<std::vector<uint32_t>>()) ws.push_back(from_bits(b));
    const int64_t rb = dtype_row_bytes(t, k), n_w = fp8_row_scales(t, k) - 2;
    std::vector<uint8_t> w(static_cast<size_t>(n * rb));
    for (int64_t r = 0; r < n; ++r) {
      uint8_t* row = w.data() + r * rb;
      fp8_write_row_header(t, row, k, c["input_scale"].get<float>(), c["act_bound"].get<float>(),
                           ws.data() + r * n_w);
      std::memcpy(row + 4 * (n_w + 2), codes.data() + r * k, static_cast<size_t>(k));
    }
    const WeightMatrix wm{w.data(), t, n, k};
    std::vector<float> y(static_cast<size_t>(m * n));
    ref::fp8_linear(x.data(), static_cast<int32_t>(m), wm, nullptr, y.data());
    const auto want = c["y"].get<std::vector<uint32_t>>();
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(bits(y[i]), want[i]) << "y[" << i << "] = " << y[i] << ", torch "
                                     << from_bits(want[i]);
    }
    // The CPU backend gives the same bits.
    auto ops = make_cpu_ops(2);
    std::vector<float> yc(y.size());
    ops->matmul(x.data(), static_cast<int32_t>(m), wm, nullptr, yc.data());
    EXPECT_EQ(std::memcmp(y.data(), yc.data(), y.size() * 4), 0);
  }
}

TEST(Fp8Linear, MatchesTorchGoldenBitForBit) { expect_golden("linear_golden.json", 5); }

// transformers' fp8 arithmetic (kF8E4M3G128): activations per token and 128-column group,
// (P_b · s_b) · s_w[b] summed over blocks — against torch's casts and a sequential numpy sum.
TEST(Fp8Linear, GroupActivationsMatchTorchGoldenBitForBit) {
  expect_golden("linear_g128_golden.json", 3);
}

// kF8E4M3G128 by hand: two groups of one row, each with its own scale. The same row with
// kF8E4M3B128 (one scale for the whole row) gives other bits — the quiet group loses its
// precision to the loud one.
TEST(Fp8Linear, GroupScalesByHand) {
  const int64_t k = 130;  // a full group and a partial one of 2 columns
  const DType t = DType::kF8E4M3G128;
  std::vector<uint8_t> row(static_cast<size_t>(dtype_row_bytes(t, k)));
  const float ws[2] = {0.5f, 0.25f};
  fp8_write_row_header(t, row.data(), k, 0.0f, 0.0f, ws);
  uint8_t* codes = row.data() + 4 * fp8_row_scales(t, k);
  std::vector<float> x(static_cast<size_t>(k), 0.0f);
  for (int64_t i = 0; i < k; ++i) codes[i] = float_to_fp8_e4m3(0.0f);
  x[0] = 1.0f;    // group 0: amax 3 → s_0 = 3 / 448
  x[1] = -3.0f;
  codes[0] = float_to_fp8_e4m3(1.0f);
  codes[1] = float_to_fp8_e4m3(0.5f);
  x[128] = 0.01f;  // group 1: amax 0.01 → s_1 = 0.01 / 448, q = 448
  codes[128] = float_to_fp8_e4m3(2.0f);
  const float s0 = 3.0f / 448.0f, s1 = 0.01f / 448.0f;
  const float p0 = 144.0f * 1.0f + -448.0f * 0.5f, p1 = 448.0f * 2.0f;
  float want = 0.0f;
  want += p0 * s0 * 0.5f;
  want += p1 * s1 * 0.25f;
  float y = 0;
  ref::fp8_linear(x.data(), 1, {row.data(), t, 1, k}, nullptr, &y);
  EXPECT_EQ(bits(y), bits(want)) << y << " vs " << want;
  auto ops = make_cpu_ops(1);
  float yc = 0;
  ops->matmul(x.data(), 1, {row.data(), t, 1, k}, nullptr, &yc);
  EXPECT_EQ(bits(yc), bits(want));
  // One scale per row (B128 on the same bytes): x[128] / (3 / 448) rounds to a subnormal code.
  float yb = 0;
  ref::fp8_linear(x.data(), 1, {row.data(), DType::kF8E4M3B128, 1, k}, nullptr, &yb);
  EXPECT_NE(bits(yb), bits(want));
  // An all-zero group keeps s = 1 and adds nothing.
  x[128] = 0.0f;
  ref::fp8_linear(x.data(), 1, {row.data(), t, 1, k}, nullptr, &y);
  EXPECT_EQ(bits(y), bits(p0 * s0 * 0.5f + 0.0f * 1.0f * 0.25f));
}

TEST(Fp8Linear, DefinitionByHand) {
  // k = 2, one row: x = (1, -3) dynamic → s_x = 3 / 448; q = e4m3(x / s_x) = (149.33 → 144,
  // -448); w codes 1.0 and 0.5, s_w 0.25: y = ((144 - 224) · s_x) · 0.25.
  std::vector<uint8_t> row(static_cast<size_t>(dtype_row_bytes(DType::kF8E4M3, 2)));
  const float sw = 0.25f;
  fp8_write_row_header(DType::kF8E4M3, row.data(), 2, 0.0f, 0.0f, &sw);
  row[12] = float_to_fp8_e4m3(1.0f);
  row[13] = float_to_fp8_e4m3(0.5f);
  const float x[2] = {1.0f, -3.0f};
  const float sx = 3.0f / 448.0f;
  EXPECT_EQ(fp8_e4m3_to_float(float_to_fp8_e4m3(1.0f / sx)), 144.0f);
  float y = 0;
  ref::fp8_linear(x, 1, {row.data(), DType::kF8E4M3, 1, 2}, nullptr, &y);
  EXPECT_EQ(y, (144.0f - 224.0f) * sx * 0.25f);
  // An all-zero row: s_x = 1, y = 0 (no division by zero).
  const float z[2] = {0.0f, 0.0f};
  EXPECT_EQ(ref::fp8_activation_scale(z, 2, 0.0f, 0.0f), 1.0f);
  ref::fp8_linear(z, 1, {row.data(), DType::kF8E4M3, 1, 2}, nullptr, &y);
  EXPECT_EQ(y, 0.0f);
  // A bound caps the amax; a static scale replaces it.
  EXPECT_EQ(ref::fp8_activation_scale(x, 2, 0.0f, 2.0f), 2.0f / 448.0f);
  EXPECT_EQ(ref::fp8_activation_scale(x, 2, 0.5f, 2.0f), 0.5f);
}

TEST(Fp8Linear, CpuKernelEqualsDefinitionAndIsBatchInvariant) {
  for (const DType t : {DType::kF8E4M3, DType::kF8E4M3B128, DType::kF8E4M3G128}) {
    for (const int64_t k : {16, 128, 300}) {
      // n 37: four full 8-lane groups and a partial one; three static scales cycling over the
      // rows (a fused q/k/v with a boundary inside a group), then dynamic, then bounded.
      for (int scheme = 0; scheme < 3; ++scheme) {
        const int64_t n = 37;
        std::vector<float> in = scheme == 0 ? std::vector<float>{0.01f, 0.02f, 0.005f}
                                            : std::vector<float>{0.0f};
        const auto w = random_rows(t, n, k, static_cast<uint32_t>(k + scheme), in,
                                   scheme == 2 ? 1.5f : 0.0f);
        const WeightMatrix wm{w.data(), t, n, k};
        const int32_t m = 19;
        const auto x = testing::random_floats(static_cast<size_t>(m * k), 5, -3.0f, 3.0f);
        const auto bias = testing::random_floats(static_cast<size_t>(n), 6, -1.0f, 1.0f);
        std::vector<float> want(static_cast<size_t>(m * n));
        ref::fp8_linear(x.data(), m, wm, bias.data(), want.data());
        for (int threads : {1, 3}) {
          auto ops = make_cpu_ops(threads);
          for (int32_t mm : {1, 2, 8, 19}) {
            std::vector<float> y(static_cast<size_t>(mm * n));
            ops->matmul(x.data(), mm, wm, bias.data(), y.data());
            ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0)
                << dtype_name(t) << " k " << k << " scheme " << scheme << " threads " << threads
                << " m " << mm;
          }
          // Row 7 alone equals row 7 of the batch.
          std::vector<float> y(static_cast<size_t>(n));
          ops->matmul(x.data() + 7 * k, 1, wm, bias.data(), y.data());
          ASSERT_EQ(std::memcmp(y.data(), want.data() + 7 * n, y.size() * 4), 0);
        }
      }
    }
  }
}

// The refused scheme, for contrast: one activation scale for the whole call (max over every
// row) makes a row's bits depend on its neighbours.
TEST(Fp8Linear, PerTensorDynamicScaleDependsOnTheBatch) {
  const int64_t n = 16, k = 64;
  const auto w = random_rows(DType::kF8E4M3, n, k, 3);
  const auto x = testing::random_floats(static_cast<size_t>(2 * k), 9, -1.0f, 1.0f);
  std::vector<float> x2 = x;
  for (int64_t i = k; i < 2 * k; ++i) x2[static_cast<size_t>(i)] *= 50.0f;  // a loud neighbour
  auto batch_scale = [&](const std::vector<float>& xs, int32_t m) {
    float a = 0;
    for (int64_t i = 0; i < m * k; ++i) a = std::max(a, std::fabs(xs[static_cast<size_t>(i)]));
    std::vector<uint8_t> ww = w;  // the batch's scale as every row's static scale
    for (int64_t r = 0; r < n; ++r) {
      const float s = a / 448.0f;
      std::memcpy(ww.data() + r * dtype_row_bytes(DType::kF8E4M3, k), &s, 4);
    }
    std::vector<float> y(static_cast<size_t>(m * n));
    ref::fp8_linear(xs.data(), m, {ww.data(), DType::kF8E4M3, n, k}, nullptr, y.data());
    return std::vector<float>(y.begin(), y.begin() + n);  // row 0
  };
  EXPECT_NE(batch_scale(x, 1), batch_scale(x2, 2));
  // Per token, row 0 is the same with either neighbour.
  std::vector<float> a(static_cast<size_t>(2 * n)), b(static_cast<size_t>(2 * n));
  ref::fp8_linear(x.data(), 2, {w.data(), DType::kF8E4M3, n, k}, nullptr, a.data());
  ref::fp8_linear(x2.data(), 2, {w.data(), DType::kF8E4M3, n, k}, nullptr, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), static_cast<size_t>(n) * 4), 0);
}

// --kv-dtype fp8's append: each value stored as dec(e4m3(v / s)) · s with its head's scale,
// the CPU kernel and the reference alike; without scales, exact copies.
TEST(Fp8KvAppend, StoresEachValueRoundedOnceWithItsHeadsScale) {
  const int32_t n_kv = 2, hd = 8, n_tokens = 3, block = 4;
  const int64_t row = n_kv * hd;
  const auto k = testing::random_floats(static_cast<size_t>(n_tokens * row), 1, -5.0f, 5.0f);
  const auto v = testing::random_floats(static_cast<size_t>(n_tokens * row), 2, -5.0f, 5.0f);
  const float ks[n_kv] = {0.01f, 0.003f}, vs[n_kv] = {0.02f, 0.0125f};
  const int32_t positions[n_tokens] = {0, 1, 2}, seq[n_tokens] = {0, 0, 0},
                slots[n_tokens] = {5, 6, 7}, table[2] = {1, 0};
  StepBatch b;
  b.n_tokens = n_tokens;
  b.positions = positions;
  b.seq_of_token = seq;
  b.slots = slots;
  b.n_seqs = 1;
  b.max_blocks = 2;
  b.block_tables = table;
  for (const bool cpu : {true, false}) {
    auto ops = cpu ? make_cpu_ops(2, CpuActivations::kF32, true) : make_ref_ops(true);
    ASSERT_TRUE(ops->kv_fp8());
    std::vector<float> kc(static_cast<size_t>(2 * block * row)), vc(kc.size());
    KvCacheLayer c{kc.data(), vc.data(), 2, block, n_kv, hd, DType::kF32};
    c.k_scale = ks;
    c.v_scale = vs;
    ops->kv_append(k.data(), v.data(), b, c);
    for (int32_t t = 0; t < n_tokens; ++t) {
      for (int64_t i = 0; i < row; ++i) {
        const size_t src = static_cast<size_t>(t * row + i);
        const size_t dst = static_cast<size_t>(slots[t] * row + i);
        const float s = ks[i / hd], sv = vs[i / hd];
        ASSERT_EQ(bits(kc[dst]), bits(fp8_e4m3_to_float(float_to_fp8_e4m3(k[src] / s)) * s));
        ASSERT_EQ(bits(vc[dst]), bits(fp8_e4m3_to_float(float_to_fp8_e4m3(v[src] / sv)) * sv));
      }
    }
    // Without scales: the values as given.
    c.k_scale = c.v_scale = nullptr;
    ops->kv_append(k.data(), v.data(), b, c);
    EXPECT_EQ(std::memcmp(kc.data() + 5 * row, k.data(), static_cast<size_t>(row) * 4), 0);
  }
}

}  // namespace
}  // namespace detllm::kernels
