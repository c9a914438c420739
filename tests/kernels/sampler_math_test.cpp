// The shared host/device sampler arithmetic (kernels/sampling/sampler_math.h), on the CPU: 128-bit
// helpers against unsigned __int128, the exact top-p threshold and draw target, the HD Philox
// draw against core/philox.h, the rank key against the sampler's float comparison, and masses.
// The device side of the same header: tests/cuda/cuda_sampling_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/philox.h"
#include "kernels/sampling/masses_simd.h"
#include "kernels/sampling/sampler_math.h"

namespace detllm {
namespace {

namespace sm = sampler_math;
__extension__ typedef unsigned __int128 u128_t;

u128_t wide(sm::U128 v) {
  return (static_cast<u128_t>(v.hi) << 64) | v.lo;
}
sm::U128 narrow(u128_t v) {
  sm::U128 r;
  r.lo = static_cast<uint64_t>(v);
  r.hi = static_cast<uint64_t>(v >> 64);
  return r;
}

class Rng {
 public:
  explicit Rng(uint32_t seed) : engine_(seed) {}
  uint64_t bits64() { return (static_cast<uint64_t>(engine_()) << 32) | engine_(); }
  uint64_t below(uint64_t n) { return bits64() % n; }
  // A value with a random bit length in [0, max_bits].
  u128_t value(int max_bits) {
    const int bits = static_cast<int>(below(static_cast<uint64_t>(max_bits) + 1));
    const u128_t v = (static_cast<u128_t>(bits64()) << 64) | bits64();
    return bits == 0 ? 0 : bits >= 128 ? v : v & ((static_cast<u128_t>(1) << bits) - 1);
  }

 private:
  std::mt19937 engine_;
};

TEST(SamplerMathExact, AddMulCompareMatchInt128) {
  Rng rng(1);
  for (int i = 0; i < 200000; ++i) {
    const u128_t a = rng.value(126), b = rng.value(126);
    EXPECT_EQ(wide(sm::add(narrow(a), narrow(b))), a + b);
    EXPECT_EQ(sm::operator<(narrow(a), narrow(b)), a < b);
    const uint64_t x = rng.bits64() >> rng.below(64), y = rng.bits64() >> rng.below(64);
    EXPECT_EQ(wide(sm::mul_wide(x, y)), static_cast<u128_t>(x) * y);
    EXPECT_EQ(wide(sm::add(narrow(a), x)), a + x);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(SamplerMathExact, ToDoubleRoundsToNearestEven) {
  Rng rng(2);
  for (int i = 0; i < 200000; ++i) {
    u128_t v = rng.value(128);
    if (i % 4 == 0) {  // ties and near-ties: 54 significant bits, then zeros or a low bit
      const int shift = static_cast<int>(rng.below(74));
      v = (static_cast<u128_t>(rng.bits64() >> 10) << shift) | (i % 8 == 0 ? 1 : 0);
    }
    // GCC's unsigned __int128 -> double conversion rounds to nearest even.
    ASSERT_EQ(std::bit_cast<uint64_t>(sm::to_double(narrow(v))),
              std::bit_cast<uint64_t>(static_cast<double>(v)))
        << "case " << i;
  }
  EXPECT_EQ(sm::to_double(sm::U128{}), 0.0);
}

TEST(SamplerMathExact, TopPThresholdIsTheExactCeiling) {
  Rng rng(3);
  for (int i = 0; i < 100000; ++i) {
    const u128_t z = rng.value(94);
    float p = std::bit_cast<float>(static_cast<uint32_t>(rng.bits64()) & 0x3f7fffffu);  // [0, 1)
    if (i % 10 == 0)
      p = std::bit_cast<float>(static_cast<uint32_t>(rng.below(0x800000)));  // subnormal
    if (!(p > 0.0f)) continue;
    // p = m 2^-shift; ceil(m z / 2^shift) with m z < 2^118.
    const uint32_t b = std::bit_cast<uint32_t>(p);
    const uint32_t e = b >> 23;
    const u128_t m = e == 0 ? (b & 0x7fffffu) : ((b & 0x7fffffu) | 0x800000u);
    const int shift = e == 0 ? 149 : 150 - static_cast<int>(e);
    const u128_t prod = m * z;
    u128_t want = 0;
    if (shift >= 128) {
      want = prod != 0 ? 1 : 0;
    } else {
      want = prod >> shift;
      if ((want << shift) != prod) ++want;
    }
    ASSERT_EQ(wide(sm::top_p_threshold(narrow(z), p)), want) << "case " << i;
    // and it is the real ceiling: want - 1 < p z <= want (checked in long double)
    const long double pz = static_cast<long double>(p) * static_cast<long double>(z);
    EXPECT_LE(pz, static_cast<long double>(want) * (1.0L + 1e-15L) + 1e-30L);
  }
}

TEST(SamplerMathExact, DrawTargetIsTheExactFloor) {
  Rng rng(4);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t u53 = rng.bits64() >> 11;
    // s < 2^75 keeps u53 * s inside 128 bits for the int128 reference.
    const u128_t s = rng.value(75);
    const u128_t want = (static_cast<u128_t>(u53) * s) >> 53;
    ASSERT_EQ(wide(sm::draw_target(narrow(s), u53)), want) << "case " << i;
  }
  // Large s (up to 2^94): t < s and t ~ u * s.
  for (int i = 0; i < 10000; ++i) {
    const uint64_t u53 = rng.bits64() >> 11;
    const u128_t s = rng.value(94) | 1;
    const u128_t t = wide(sm::draw_target(narrow(s), u53));
    EXPECT_LT(t, s);
    const long double approx =
        static_cast<long double>(u53) * 0x1p-53L * static_cast<long double>(s);
    EXPECT_NEAR(static_cast<double>(static_cast<long double>(t) - approx), 0.0,
                static_cast<double>(approx * 1e-15L) + 1.0);
  }
}

TEST(SamplerMathExact, PhiloxDrawEqualsCorePhilox) {
  Rng rng(5);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t seed = rng.bits64();
    const uint32_t position = static_cast<uint32_t>(rng.bits64());
    const uint32_t index = static_cast<uint32_t>(rng.below(8));
    const PhiloxCounter b =
        philox_random_block(seed, position, index, 0, RandomDomain::kSampleToken);
    const uint64_t u53 = sm::draw_bits53(seed, position, index);
    ASSERT_EQ(static_cast<double>(u53) * 0x1p-53, uniform53_from_bits(b[0], b[1]));
    ASSERT_EQ(u53, ((static_cast<uint64_t>(b[0]) << 32) | b[1]) >> 11);
  }
}

TEST(SamplerMathExact, RankKeyOrdersLikeTheFloatComparison) {
  Rng rng(6);
  const float special[] = {0.0f,
                           -0.0f,
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::denorm_min(),
                           -std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::max(),
                           -std::numeric_limits<float>::max(),
                           1.0f,
                           -1.0f,
                           1e-30f,
                           -1e-30f};
  std::vector<float> values(std::begin(special), std::end(special));
  for (int i = 0; i < 2000; ++i) {
    float v = std::bit_cast<float>(static_cast<uint32_t>(rng.bits64()));
    if (std::isnan(v) || v == std::numeric_limits<float>::infinity()) v = 0.5f;
    values.push_back(v);
  }
  for (int i = 0; i < 200000; ++i) {
    const float a = values[rng.below(values.size())], b = values[rng.below(values.size())];
    const uint32_t ia = static_cast<uint32_t>(rng.below(152064)),
                   ib = static_cast<uint32_t>(rng.below(152064));
    const bool before = a > b || (a == b && ia < ib);
    ASSERT_EQ(sm::rank_key(a, ia, 18) < sm::rank_key(b, ib, 18), before)
        << a << " id " << ia << " vs " << b << " id " << ib;
  }
  EXPECT_EQ(sm::rank_value_key(-std::numeric_limits<float>::infinity()),
            sm::rank_value_key_neg_inf());
}

TEST(SamplerMathExact, MassesAreFixedPointWeights) {
  EXPECT_EQ(sm::mass_of_weight(1.0), uint64_t{1} << 63);
  EXPECT_EQ(sm::mass_of_weight(0.0), 0u);
  EXPECT_EQ(sm::mass_of_weight(0.5), uint64_t{1} << 62);
  EXPECT_EQ(sm::mass_of_weight(0x1p-64), 0u);               // below the resolution
  EXPECT_EQ(sm::mass_of_weight(0x1.8p-63), 1u);             // truncated
  EXPECT_EQ(sm::mass(3.0f, 3.0f, 0.7), uint64_t{1} << 63);  // the max: weight 1
  EXPECT_EQ(sm::mass(-std::numeric_limits<float>::infinity(), 3.0f, 1.0), 0u);
  // log_normalizer: Z1 = 2^63 (one token) gives log 1 = 0.
  EXPECT_EQ(sm::log_normalizer(sm::u128(uint64_t{1} << 63)), 0.0);
}

// masses_simd (the CPU sampler's vocabulary sums) against the scalar mass(), which defines the
// masses, on 2M random logits and the edges: the max itself (2^63), -inf, gaps at the -746
// clamp, weights near 2^-63 (masses 0 and 1) and the subnormal range, at temperatures from
// 1e-3 to 100; lengths that are not multiples of 4.
TEST(SamplerMassSimd, EqualsTheScalarMassBitForBit) {
  std::mt19937 rng(5);
  std::vector<float> x;
  const float max = 7.25f;
  x.push_back(max);
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::max());
  for (float gap : {-43.6682f, -43.668f, -44.0f, -745.0f, -745.13f, -745.2f, -746.0f, -800.0f,
                    -708.4f, -1e-7f, -1e-30f, 0.0f, -0.0f})
    x.push_back(max + gap);
  std::uniform_real_distribution<float> near(-50.0f, 0.0f), wide(-2000.0f, 0.0f);
  for (int i = 0; i < 1 << 20; ++i) x.push_back(max + near(rng));
  for (int i = 0; i < 1 << 20; ++i) x.push_back(max + wide(rng));
  x.push_back(max - 3.0f);  // a tail of 3 after the multiples of 4
  int64_t mismatches = 0;
  for (double t : {1.0, 0.7, 1.3, 1e-3, 100.0}) {
    std::vector<uint64_t> simd(x.size());
    sm::masses_simd(x.data(), x.size(), max, t, simd.data());
    for (size_t i = 0; i < x.size(); ++i) {
      if (simd[i] != sm::mass(x[i], max, t) && ++mismatches <= 5)
        ADD_FAILURE() << "x " << x[i] << " T " << t << ": " << simd[i] << " vs "
                      << sm::mass(x[i], max, t);
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(sm::mass(max, max, 1.0), uint64_t{1} << 63);  // the edge the test must reach
}

}  // namespace
}  // namespace detllm
