// The CPU backend's SIMD building blocks: the 8-at-once horizontal sum has exactly hsum8's
// tree, and exp8 stays within a few ulp of libm's expf. Run: test_kernels --gtest_filter='Simd*'.
#include "kernels/cpu/simd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace detllm::kernels::cpu {
namespace {

int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

TEST(Simd, Hsum8x8MatchesHsum8) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
  for (int rep = 0; rep < 1000; ++rep) {
    alignas(32) float v[8][8];
    __m256 a[8];
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 8; ++j)
        v[i][j] = dist(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
      a[i] = _mm256_load_ps(v[i]);
    }
    alignas(32) float sums[8];
    _mm256_store_ps(sums, hsum8x8(a));
    for (int i = 0; i < 8; ++i) {
      const float want =
          ((v[i][0] + v[i][1]) + (v[i][2] + v[i][3])) + ((v[i][4] + v[i][5]) + (v[i][6] + v[i][7]));
      ASSERT_EQ(std::memcmp(&sums[i], &want, 4), 0);
      const float one = hsum8(a[i]);
      ASSERT_EQ(std::memcmp(&one, &want, 4), 0);
    }
  }
}

TEST(Simd, Exp8IsWithinFourUlpOfExpf) {
  int64_t worst = 0;
  for (float x = -86.9f; x < 87.9f; x += 0.0137f) {
    const float got = exp1(x);
    worst = std::max(worst, ulp_distance(got, std::exp(x)));
  }
  EXPECT_LE(worst, 4);
  RecordProperty("exp8_max_ulp", static_cast<int>(worst));
  EXPECT_EQ(exp1(-INFINITY), 0.0f);
  EXPECT_EQ(exp1(-100.0f), 0.0f);
  EXPECT_EQ(exp1(0.0f), 1.0f);
  EXPECT_TRUE(std::isinf(exp1(100.0f)));
  EXPECT_TRUE(std::isnan(exp1(NAN)));
}

}  // namespace
}  // namespace detllm::kernels::cpu
