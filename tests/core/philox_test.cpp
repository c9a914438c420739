// Philox4x32 against the published Random123 known-answer vectors (kat_vectors, lines
// "philox4x32 7" and "philox4x32 10": counter[4] key[2] -> output[4]), the exact uniform
// mappings, and the engine's keying layout.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "core/philox.h"

namespace detllm {
namespace {

struct Kat {
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxCounter expected;
};

constexpr Kat kKat10[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},  // digits of pi
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

constexpr Kat kKat7[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
};

// The generator is constexpr: the known answers hold at compile time too.
static_assert(philox4x32_10(kKat10[2].counter, kKat10[2].key) == kKat10[2].expected);

TEST(Philox, KnownAnswers10Rounds) {
  for (const Kat& kat : kKat10) {
    EXPECT_EQ(philox4x32_10(kat.counter, kat.key), kat.expected);
  }
}

TEST(Philox, KnownAnswers7Rounds) {
  for (const Kat& kat : kKat7) {
    EXPECT_EQ(philox4x32<7>(kat.counter, kat.key), kat.expected);
  }
}

TEST(Philox, UniformFromBitsIsExact24Bit) {
  EXPECT_EQ(uniform_from_bits(0u), 0.0f);
  EXPECT_EQ(uniform_from_bits(0xffu), 0.0f);  // the low 8 bits are dropped
  EXPECT_EQ(uniform_from_bits(0x100u), 0x1p-24f);
  EXPECT_EQ(uniform_from_bits(0x80000000u), 0.5f);
  EXPECT_EQ(uniform_from_bits(0xffffffffu), 1.0f - 0x1p-24f);  // never 1
  EXPECT_LT(uniform_from_bits(0xffffffffu), 1.0f);
  for (uint32_t k : {1u, 12345u, 0xabcdefu, 0xffffffu}) {
    EXPECT_EQ(uniform_from_bits(k << 8), static_cast<float>(k) * 0x1p-24f);
  }
}

TEST(Philox, Uniform53FromBitsIsExact53Bit) {
  EXPECT_EQ(uniform53_from_bits(0u, 0u), 0.0);
  EXPECT_EQ(uniform53_from_bits(0u, 0x800u), 0x1p-53);
  EXPECT_EQ(uniform53_from_bits(0x80000000u, 0u), 0.5);
  EXPECT_EQ(uniform53_from_bits(0xffffffffu, 0xffffffffu), 1.0 - 0x1p-53);
}

TEST(Philox, KeyingLayout) {
  const uint64_t seed = 0x0123456789abcdefULL;
  EXPECT_EQ(philox_key_from_seed(seed), (PhiloxKey{0x89abcdefu, 0x01234567u}));
  const PhiloxCounter block = philox_random_block(seed, 17, 3, 2, RandomDomain::kSampleToken);
  EXPECT_EQ(block, philox4x32_10({17, 3, 2, 1}, {0x89abcdefu, 0x01234567u}));
}

TEST(Philox, NeighbouringCountersGiveDistinctBlocks) {
  // Any change of seed half, position, sample index, draw or domain changes the block.
  std::set<PhiloxCounter> seen;
  for (uint64_t seed : {0ULL, 1ULL, 1ULL << 32}) {
    for (uint32_t position = 0; position < 8; ++position) {
      for (uint32_t index = 0; index < 4; ++index) {
        for (uint32_t draw = 0; draw < 2; ++draw) {
          seen.insert(philox_random_block(seed, position, index, draw, RandomDomain::kSampleToken));
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), 3u * 8 * 4 * 2);
}

}  // namespace
}  // namespace detllm
