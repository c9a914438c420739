// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator, so every random number is a pure function of (key, counter) and
// no stream state exists that batching, ordering or restarts could perturb (design.md §1).
#pragma once

#include <array>
#include <cstdint>

namespace detllm {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Round multipliers and Weyl key increments of Philox4x32 (from the paper).
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

// Philox4x32 with `n_rounds` rounds. Each round: two 32x32->64 products of the even words,
// the high halves xor-ed with the odd words and the round key, the words permuted; the key
// is bumped by the Weyl constants before every round after the first.
template <int n_rounds>
constexpr PhiloxCounter philox4x32(PhiloxCounter ctr, PhiloxKey key) {
  static_assert(n_rounds >= 1 && n_rounds <= 16);
  for (int round = 0; round < n_rounds; ++round) {
    if (round > 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    const uint64_t prod0 = static_cast<uint64_t>(kPhiloxM0) * ctr[0];
    const uint64_t prod1 = static_cast<uint64_t>(kPhiloxM1) * ctr[2];
    ctr = PhiloxCounter{
        static_cast<uint32_t>(prod1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(prod1),
        static_cast<uint32_t>(prod0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(prod0)};
  }
  return ctr;
}

// The generator detllm uses: 10 rounds (the Random123 default; 7 already pass BigCrush).
constexpr PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  return philox4x32<10>(counter, key);
}

// 32 random bits -> float in [0, 1): the top 24 bits times 2^-24. Every result k * 2^-24
// (k = 0 .. 2^24 - 1) is exactly representable, each with probability 2^-24; the largest is
// 1 - 2^-24, so 1.0 is never returned.
constexpr float uniform_from_bits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * 0x1p-24f;
}

// 64 random bits (hi, lo) -> double in [0, 1): the top 53 bits times 2^-53, exact, same
// construction as uniform_from_bits at double precision. The sampler uses this one, so
// tokens with probabilities far below 2^-24 are still drawn at their true rate.
constexpr double uniform53_from_bits(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

// What a draw is for. The tag is counter word 3, so two uses of randomness at the same
// (seed, position, sample index) never share numbers. Append new tags; never renumber
// (that would change every seeded output).
enum class RandomDomain : uint32_t {
  kSampleToken = 1,  // the sampler's inverse-CDF uniform
};

// The one keying scheme of the engine (design.md §1): never a global stream.
//   key     = seed (low 32 bits, high 32 bits)
//   counter = [position, sample_index, draw, domain]
//     position      absolute position in the sequence where the sampled token will go
//     sample_index  which of the n samples of a prompt (0 .. n-1)
//     draw          0, 1, ... when one use needs more than one block at a position
//     domain        RandomDomain tag
constexpr PhiloxKey philox_key_from_seed(uint64_t seed) {
  return PhiloxKey{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
}

constexpr PhiloxCounter philox_random_block(uint64_t seed, uint32_t position, uint32_t sample_index,
                                            uint32_t draw, RandomDomain domain) {
  return philox4x32_10(PhiloxCounter{position, sample_index, draw, static_cast<uint32_t>(domain)},
                       philox_key_from_seed(seed));
}

}  // namespace detllm
