// Constrained sampling (kernels/sampling/masked_sample.h) against its specification: the token
// is the reference sampler's on the masked row, the logprobs are the unmasked row's, a token
// outside the mask is never drawn, and a mask that allows nothing finite gives no token.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/ref/ref_sampler.h"
#include "kernels/sampling/masked_sample.h"
#include "kernels/sampling/sampler.h"

namespace detllm {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Mask {
  std::vector<uint32_t> words;
  int32_t width = 0;
  bool allows(int32_t id) const {
    return id >= 0 && id < width && ((words[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u);
  }
  AllowedIds ids() const { return {words, width}; }
};

Mask random_mask(int32_t width, double share, std::mt19937& rng) {
  Mask m{std::vector<uint32_t>((static_cast<size_t>(width) + 31) / 32, 0u), width};
  std::bernoulli_distribution keep(share);
  for (int32_t i = 0; i < width; ++i) {
    if (keep(rng)) m.words[static_cast<size_t>(i) / 32] |= 1u << (i % 32);
  }
  return m;
}

std::vector<float> random_logits(int32_t vocab, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(vocab));
  for (float& v : x) v = d(rng);
  return x;
}

SamplingParams params_of(float t, int32_t top_k, float top_p, float min_p, int32_t n_logprobs) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = 1234;
  p.n_logprobs = n_logprobs;
  return p;
}

TEST(MaskedSample, MatchesTheSpecificationOnRandomRowsAndMasks) {
  std::mt19937 rng(7);
  AllowedScratch scratch;
  const SamplingParams settings[] = {params_of(0.0f, 0, 1.0f, 0.0f, 3),
                                     params_of(1.0f, 0, 1.0f, 0.0f, 0),
                                     params_of(0.7f, 20, 0.9f, 0.0f, 5),
                                     params_of(1.3f, 0, 0.95f, 0.05f, 2)};
  int n_checked = 0;
  for (int round = 0; round < 60; ++round) {
    const int32_t vocab = 50 + round * 37;
    const std::vector<float> x = random_logits(vocab, rng);
    // Widths below, equal to and above the row (a tokenizer narrower or wider than the model).
    const int32_t width = vocab + (round % 3 - 1) * 5;
    const Mask mask = random_mask(width, round % 2 ? 0.02 : 0.5, rng);
    std::vector<float> masked(x.size(), kNegInf);
    bool any = false;
    for (int32_t i = 0; i < vocab; ++i) {
      if (mask.allows(i)) masked[static_cast<size_t>(i)] = x[static_cast<size_t>(i)], any = true;
    }
    for (const SamplingParams& p : settings) {
      const int64_t position = 100 + round;
      const SampleResult got = sample_allowed(x, p, position, 3, mask.ids(), scratch);
      if (!any) {
        EXPECT_TRUE(got.none_allowed);
        continue;
      }
      ASSERT_FALSE(got.none_allowed);
      SamplingParams selection = p;
      selection.n_logprobs = 0;
      const SampleResult want = sample_reference(masked, selection, position, 3);
      ASSERT_EQ(got.token, want.token) << "round " << round;
      ASSERT_TRUE(mask.allows(got.token));
      EXPECT_EQ(std::bit_cast<uint32_t>(got.logprob), std::bit_cast<uint32_t>(logprob_of(x, got.token)));
      EXPECT_EQ(got.top_logprobs, top_logprobs(x, p.n_logprobs));
      ++n_checked;
    }
  }
  EXPECT_GT(n_checked, 150);
}

TEST(MaskedSample, NeverDrawsADisallowedTokenAndTheMaskMatters) {
  // The negative control of this test: the same draws without the mask pick disallowed ids.
  std::mt19937 rng(11);
  AllowedScratch scratch;
  const std::vector<float> x = random_logits(1000, rng);
  const Mask mask = random_mask(1000, 0.1, rng);
  int unmasked_outside = 0;
  for (uint32_t k = 0; k < 200; ++k) {
    const SamplingParams p = params_of(1.0f, 0, 1.0f, 0.0f, 0);
    const SampleResult got = sample_allowed(x, p, k, 0, mask.ids(), scratch);
    ASSERT_TRUE(mask.allows(got.token)) << got.token;
    unmasked_outside += !mask.allows(sample(x, p, k, 0).token);
  }
  EXPECT_GT(unmasked_outside, 100);
}

TEST(MaskedSample, AllowedIdsWithOnlyInfiniteLogitsGiveNoToken) {
  std::vector<float> x(64, 1.0f);
  x[5] = kNegInf;
  Mask mask{std::vector<uint32_t>(2, 0u), 64};
  mask.words[0] = 1u << 5;
  AllowedScratch scratch;
  const SampleResult got = sample_allowed(x, params_of(1.0f, 0, 1.0f, 0.0f, 0), 0, 0, mask.ids(),
                                          scratch);
  EXPECT_TRUE(got.none_allowed);
  mask.words[0] |= 1u << 6;
  const SampleResult one = sample_allowed(x, params_of(1.0f, 0, 1.0f, 0.0f, 0), 0, 0, mask.ids(),
                                          scratch);
  EXPECT_FALSE(one.none_allowed);
  EXPECT_EQ(one.token, 6);
}

TEST(MaskedSample, RefusesABitmaskOfTheWrongSize) {
  std::vector<float> x(64, 0.0f);
  std::vector<uint32_t> words(1, ~0u);
  AllowedScratch scratch;
  EXPECT_THROW(sample_allowed(x, SamplingParams{}, 0, 0, AllowedIds{words, 64}, scratch), Error);
}

}  // namespace
}  // namespace detllm
