// The sampler: reproducibility and Philox keying, tie-breaking, filter semantics on hand-made
// distributions, sampling frequencies against softmax(logits / T), logprob_of == the sampled
// logprob bit for bit, validation errors, the fast path against sample_reference, and the host
// default of Ops::sample_rows. The shared host/device math: sampler_math_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/ref/ref_sampler.h"
#include "kernels/sampling/sample_row.h"
#include "kernels/sampling/sampler.h"

namespace detllm {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

SamplingParams make_params(float temperature, uint64_t seed = 42) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

// Deterministic test data: mt19937's output sequence is fixed by the standard; the mapping to
// floats is ours (std distributions are implementation-defined).
class TestRng {
 public:
  explicit TestRng(uint32_t seed) : engine_(seed) {}
  uint32_t bits() { return static_cast<uint32_t>(engine_()); }
  double uniform() { return static_cast<double>(bits() >> 8) * 0x1p-24; }  // [0, 1)
  size_t below(size_t n) { return static_cast<size_t>(bits() % n); }

 private:
  std::mt19937 engine_;
};

// Empirical frequencies of `draws` samples taken at positions 0 .. draws-1.
std::vector<double> frequencies(const std::vector<float>& logits, const SamplingParams& params,
                                int draws) {
  std::vector<double> freq(logits.size(), 0.0);
  for (int pos = 0; pos < draws; ++pos) {
    freq[static_cast<size_t>(sample(logits, params, pos, 0).token)] += 1.0;
  }
  for (double& f : freq) f /= draws;
  return freq;
}

// softmax(logits / T) restricted to `kept` (renormalized), in double.
std::vector<double> expected_probs(const std::vector<float>& logits, double temperature,
                                   const std::set<int>& kept) {
  std::vector<double> p(logits.size(), 0.0);
  double sum = 0.0;
  for (int i : kept) {
    p[static_cast<size_t>(i)] =
        std::exp(static_cast<double>(logits[static_cast<size_t>(i)]) / temperature);
    sum += p[static_cast<size_t>(i)];
  }
  for (double& x : p) x /= sum;
  return p;
}

// Pearson chi-square of observed frequencies against probabilities (cells with p > 0), and a
// check that no draw fell outside the support.
double chi_square(const std::vector<double>& freq, const std::vector<double>& p, int draws) {
  double chi2 = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) {
      EXPECT_EQ(freq[i], 0.0) << "token " << i << " is outside the kept set";
      continue;
    }
    const double expected = p[i] * draws;
    const double diff = freq[i] * draws - expected;
    chi2 += diff * diff / expected;
  }
  return chi2;
}

// Upper 0.1% points of the chi-square distribution, by degrees of freedom. The draws are
// deterministic (Philox), so a test either always passes or always fails; these bounds
// state the tolerance: a correct sampler exceeds them with probability 1e-3.
double chi_square_limit(size_t dof) {
  static const double kLimit[] = {0,     10.83, 13.82, 16.27, 18.47, 20.52,
                                  22.46, 24.32, 26.12, 27.88, 29.59};
  return kLimit[dof];
}

std::vector<float> logits_from_weights(const std::vector<double>& weights) {
  std::vector<float> logits;
  for (double w : weights) logits.push_back(static_cast<float>(std::log(w)));
  return logits;
}

uint32_t bits_of(float x) {
  return std::bit_cast<uint32_t>(x);
}

// ---- Reproducibility and keying ----

TEST(Sampler, SameKeySameResult) {
  TestRng rng(1);
  std::vector<float> logits(1000);
  for (float& x : logits) x = static_cast<float>(rng.uniform() * 8.0);
  SamplingParams params = make_params(1.0f, 1234);
  params.n_logprobs = 5;
  for (int64_t pos : {0, 1, 77, 4096}) {
    for (uint32_t index : {0u, 1u, 7u}) {
      const SampleResult a = sample(logits, params, pos, index);
      const SampleResult b = sample(logits, params, pos, index);
      EXPECT_EQ(a.token, b.token);
      EXPECT_EQ(bits_of(a.logprob), bits_of(b.logprob));
      EXPECT_EQ(a.top_logprobs, b.top_logprobs);
    }
  }
}

TEST(Sampler, StreamsAreIndependentAcrossIndexPositionAndSeed) {
  // Uniform over 4 tokens: two independent streams agree with probability 1/4.
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f};
  const SamplingParams a = make_params(1.0f, 7);
  const SamplingParams other_seed = make_params(1.0f, 8);
  constexpr int kDraws = 4000;
  int same_index = 0, same_position = 0, same_seed = 0;
  for (int pos = 0; pos < kDraws; ++pos) {
    const int32_t t = sample(logits, a, pos, 0).token;
    same_index += t == sample(logits, a, pos, 1).token;
    same_position += t == sample(logits, a, pos + kDraws, 0).token;
    same_seed += t == sample(logits, other_seed, pos, 0).token;
  }
  // sd of the agreement rate = sqrt(0.25 * 0.75 / 4000) = 0.0068; allow 5 sd.
  for (int agree : {same_index, same_position, same_seed}) {
    EXPECT_NEAR(static_cast<double>(agree) / kDraws, 0.25, 0.035);
  }
}

// ---- Greedy and tie-breaking ----

TEST(Sampler, GreedyPicksLowestIdAmongMaxima) {
  const SamplingParams greedy = make_params(0.0f);
  EXPECT_EQ(sample(std::vector<float>{1, 3, 3, 2}, greedy, 0, 0).token, 1);
  EXPECT_EQ(sample(std::vector<float>{5, 5, 5}, greedy, 9, 3).token, 0);
  EXPECT_EQ(sample(std::vector<float>{kNegInf, -0.0f, 0.0f}, greedy, 0, 0).token, 1);
  EXPECT_EQ(sample(std::vector<float>{kNegInf, -2.0f, kNegInf, -1.0f}, greedy, 0, 0).token, 3);
  EXPECT_EQ(sample(std::vector<float>{-7.0f}, greedy, 0, 0).token, 0);
}

TEST(Sampler, GreedyIgnoresSeedPositionAndFilters) {
  TestRng rng(2);
  std::vector<float> logits(500);
  for (float& x : logits) x = static_cast<float>(std::floor(rng.uniform() * 20.0));  // ties
  const int32_t expected = sample(logits, make_params(0.0f), 0, 0).token;
  SamplingParams p = make_params(0.0f, 99);
  p.top_k = 3;
  p.top_p = 0.5f;
  p.min_p = 0.5f;
  for (int pos = 0; pos < 50; ++pos) EXPECT_EQ(sample(logits, p, pos, 5).token, expected);
}

TEST(Sampler, TopK1AndTinyTopPAndMinP1AreGreedy) {
  TestRng rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits(300);
    for (float& x : logits) x = static_cast<float>(std::floor(rng.uniform() * 10.0) * 0.5);
    const int32_t greedy = sample(logits, make_params(0.0f), 0, 0).token;
    SamplingParams top_k = make_params(1.5f, static_cast<uint64_t>(trial));
    top_k.top_k = 1;
    SamplingParams top_p = make_params(1.5f, static_cast<uint64_t>(trial));
    top_p.top_p = 1e-6f;
    for (int pos = 0; pos < 20; ++pos) {
      EXPECT_EQ(sample(logits, top_k, pos, 0).token, greedy);
      EXPECT_EQ(sample(logits, top_p, pos, 0).token, greedy);
    }
  }
  // min_p = 1 keeps exactly the tokens tied at the maximum.
  SamplingParams min_p = make_params(1.0f);
  min_p.min_p = 1.0f;
  const std::vector<float> tied = {1.0f, 4.0f, 2.0f, 4.0f, 4.0f, 3.9f};
  std::set<int32_t> drawn;
  for (int pos = 0; pos < 200; ++pos) drawn.insert(sample(tied, min_p, pos, 0).token);
  EXPECT_EQ(drawn, (std::set<int32_t>{1, 3, 4}));
}

// ---- Filter semantics on hand-made distributions ----

TEST(Sampler, TopKKeepsTheKMostLikelyWithIdTieBreak) {
  // Weights 4, 2, 2, 1 on tokens 3, 0, 2, 1: top_k = 2 keeps {3, 0} (0 beats 2 on the tie).
  const std::vector<float> logits = logits_from_weights({2, 1, 2, 4});
  SamplingParams p = make_params(1.0f);
  p.top_k = 2;
  constexpr int kDraws = 20000;
  const std::vector<double> freq = frequencies(logits, p, kDraws);
  const std::vector<double> want = expected_probs(logits, 1.0, {0, 3});
  EXPECT_LT(chi_square(freq, want, kDraws), chi_square_limit(1));
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (in scrambled token order).
  const std::vector<float> logits = logits_from_weights({0.15, 0.5, 0.05, 0.3});
  struct Case {
    float top_p;
    std::set<int> kept;
  };
  for (const Case& c :
       {Case{0.4f, {1}}, Case{0.75f, {1, 3}}, Case{0.9f, {0, 1, 3}}, Case{0.99f, {0, 1, 2, 3}}}) {
    SamplingParams p = make_params(1.0f, 5);
    p.top_p = c.top_p;
    constexpr int kDraws = 20000;
    const std::vector<double> freq = frequencies(logits, p, kDraws);
    const std::vector<double> want = expected_probs(logits, 1.0, c.kept);
    if (c.kept.size() > 1) {
      EXPECT_LT(chi_square(freq, want, kDraws), chi_square_limit(c.kept.size() - 1))
          << "top_p " << c.top_p;
    } else {
      EXPECT_EQ(freq[1], 1.0);
    }
  }
}

TEST(Sampler, MinPKeepsExactlyTheTokensAboveTheRelativeThreshold) {
  // Relative weights 1, 0.5, 0.2, 0.1, 0.05 on tokens 4, 2, 0, 3, 1.
  const std::vector<float> logits = logits_from_weights({0.2, 0.05, 0.5, 0.1, 1.0});
  struct Case {
    float min_p;
    std::set<int> kept;
  };
  for (const Case& c :
       {Case{0.15f, {0, 2, 4}}, Case{0.07f, {0, 2, 3, 4}}, Case{0.6f, {4}}, Case{0.3f, {2, 4}}}) {
    SamplingParams p = make_params(1.0f, 11);
    p.min_p = c.min_p;
    constexpr int kDraws = 20000;
    const std::vector<double> freq = frequencies(logits, p, kDraws);
    std::set<int> drawn;
    for (size_t i = 0; i < freq.size(); ++i) {
      if (freq[i] > 0) drawn.insert(static_cast<int>(i));
    }
    EXPECT_EQ(drawn, c.kept) << "min_p " << c.min_p;
    if (c.kept.size() > 1) {
      EXPECT_LT(chi_square(freq, expected_probs(logits, 1.0, c.kept), kDraws),
                chi_square_limit(c.kept.size() - 1));
    }
  }
  // Temperature applies before min-p: at T = 0.5 the relative weights square
  // (1, 0.25, 0.04, ...), so min_p = 0.15 keeps only {4, 2}.
  SamplingParams p = make_params(0.5f, 11);
  p.min_p = 0.15f;
  std::set<int32_t> drawn;
  for (int pos = 0; pos < 2000; ++pos) drawn.insert(sample(logits, p, pos, 0).token);
  EXPECT_EQ(drawn, (std::set<int32_t>{2, 4}));
}

TEST(Sampler, FiltersComposeInOrder) {
  // Weights 0.4, 0.25, 0.2, 0.1, 0.05 on tokens 0..4. top_k = 4 drops token 4 (Z = 0.95);
  // top_p = 0.6 needs a prefix mass >= 0.57: 0.4 is not enough, 0.65 is, so {0, 1};
  // min_p = 0.5 keeps weights >= 0.2, so {0, 1} still.
  const std::vector<float> logits = logits_from_weights({0.4, 0.25, 0.2, 0.1, 0.05});
  SamplingParams p = make_params(1.0f, 3);
  p.top_k = 4;
  p.top_p = 0.6f;
  p.min_p = 0.5f;
  constexpr int kDraws = 20000;
  const std::vector<double> freq = frequencies(logits, p, kDraws);
  EXPECT_LT(chi_square(freq, expected_probs(logits, 1.0, {0, 1}), kDraws), chi_square_limit(1));
  p.min_p = 0.7f;  // 0.25 / 0.4 = 0.625 < 0.7: only token 0
  EXPECT_EQ(frequencies(logits, p, 500)[0], 1.0);
}

TEST(Sampler, ZeroWeightTokensAreNeverDrawn) {
  // exp(-2000) underflows to 0 in double; masked (-inf) tokens have weight 0 too.
  const std::vector<float> logits = {kNegInf, -2000.0f, 0.0f, kNegInf, 0.0f};
  const SamplingParams p = make_params(1.0f, 1);
  std::set<int32_t> drawn;
  for (int pos = 0; pos < 2000; ++pos) drawn.insert(sample(logits, p, pos, 0).token);
  EXPECT_EQ(drawn, (std::set<int32_t>{2, 4}));
}

// ---- Statistics ----

TEST(Sampler, FrequenciesMatchTemperedSoftmax) {
  TestRng rng(4);
  std::vector<float> logits(10);
  for (float& x : logits) x = static_cast<float>(rng.uniform() * 4.0 - 2.0);
  std::set<int> all;
  for (int i = 0; i < 10; ++i) all.insert(i);
  for (float temperature : {1.0f, 0.7f, 2.5f}) {
    constexpr int kDraws = 20000;
    const std::vector<double> freq = frequencies(logits, make_params(temperature, 17), kDraws);
    const std::vector<double> want = expected_probs(logits, temperature, all);
    EXPECT_LT(chi_square(freq, want, kDraws), chi_square_limit(9)) << "T " << temperature;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(freq[i], want[i], 0.015) << "T " << temperature << " token " << i;
    }
  }
}

// ---- Logprobs ----

TEST(Sampler, LogprobsAreRawLogSoftmaxIndependentOfSamplingParams) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, kNegInf};
  const double lse = std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0);
  SamplingParams p = make_params(0.3f);
  p.top_k = 2;
  p.n_logprobs = 4;
  const SampleResult r = sample(logits, p, 0, 0);
  ASSERT_EQ(r.top_logprobs.size(), 4u);
  EXPECT_EQ(r.top_logprobs[0], (TokenLogprob{2, static_cast<float>(0.0 - lse)}));
  EXPECT_EQ(r.top_logprobs[1], (TokenLogprob{1, static_cast<float>(-1.0 - lse)}));
  EXPECT_EQ(r.top_logprobs[2], (TokenLogprob{0, static_cast<float>(-2.0 - lse)}));
  EXPECT_EQ(r.top_logprobs[3], (TokenLogprob{3, kNegInf}));
  EXPECT_EQ(logprob_of(logits, 3), kNegInf);
}

TEST(Sampler, TopLogprobsSortedByLogprobThenId) {
  const std::vector<float> logits = {2.0f, 5.0f, 5.0f, 1.0f, 5.0f, 2.0f};
  const std::vector<TokenLogprob> top = top_logprobs(logits, 4);
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0].token, 1);
  EXPECT_EQ(top[1].token, 2);
  EXPECT_EQ(top[2].token, 4);
  EXPECT_EQ(top[3].token, 0);
  EXPECT_EQ(top_logprobs(logits, 100).size(), logits.size());  // clamped to the vocab
}

TEST(Sampler, TopLogprobsOrderTheReportedValuesEvenWhenLogitsDiffer) {
  // Logits a few ulps apart may or may not round to the same reported logprob; wherever the
  // reported floats tie, the lower id must come first, whatever the logit order says.
  TestRng rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(50);
    const float base = static_cast<float>(rng.uniform() * 100.0);
    for (float& x : logits) {
      x = base;
      for (size_t steps = rng.below(4); steps > 0; --steps) x = std::nextafter(x, 0.0f);
    }
    const std::vector<TokenLogprob> top = top_logprobs(logits, 20);
    for (size_t i = 1; i < top.size(); ++i) {
      const bool ordered =
          top[i - 1].logprob > top[i].logprob ||
          (top[i - 1].logprob == top[i].logprob && top[i - 1].token < top[i].token);
      EXPECT_TRUE(ordered) << "trial " << trial << " entry " << i;
    }
  }
}

TEST(Sampler, LogprobOfMatchesSampledLogprobBitwise) {
  TestRng rng(6);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(2000);
    for (float& x : logits) x = static_cast<float>(rng.uniform() * 30.0 - 15.0);
    SamplingParams p = make_params(trial % 2 ? 1.0f : 0.8f, static_cast<uint64_t>(trial));
    p.n_logprobs = 20;
    const SampleResult r = sample(logits, p, trial, 0);
    EXPECT_EQ(bits_of(logprob_of(logits, r.token)), bits_of(r.logprob));
    for (const TokenLogprob& t : r.top_logprobs) {
      EXPECT_EQ(bits_of(logprob_of(logits, t.token)), bits_of(t.logprob));
    }
    double total = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
      total += std::exp(static_cast<double>(logprob_of(logits, static_cast<int32_t>(i))));
    }
    EXPECT_NEAR(total, 1.0, 1e-4);
    if (trial == 0) break;  // the whole-vocab sum is slow-ish; once is enough
  }
}

// ---- Validation ----

TEST(Sampler, ValidateRejectsOutOfRangeParams) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const auto rejects = [](SamplingParams p) { EXPECT_THROW(p.validate(), Error); };
  SamplingParams ok;
  EXPECT_NO_THROW(ok.validate());
  SamplingParams p = ok;
  for (float t : {-0.1f, nan, inf}) {
    p = ok;
    p.temperature = t;
    rejects(p);
  }
  for (float v : {0.0f, -0.5f, 1.01f, nan}) {
    p = ok;
    p.top_p = v;
    rejects(p);
  }
  for (float v : {-0.01f, 1.5f, nan}) {
    p = ok;
    p.min_p = v;
    rejects(p);
  }
  p = ok;
  p.top_k = -2;
  rejects(p);
  for (int32_t n : {-1, 21}) {
    p = ok;
    p.n_logprobs = n;
    rejects(p);
  }
  // The boundaries themselves are valid.
  p = ok;
  p.temperature = 0.0f;
  p.top_k = -1;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.n_logprobs = 20;
  EXPECT_NO_THROW(p.validate());
  p.top_k = 0;
  p.min_p = 0.0f;
  p.n_logprobs = 0;
  EXPECT_NO_THROW(p.validate());

  try {
    p = ok;
    p.top_p = 1.5f;
    p.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos) << e.what();
  }
}

TEST(Sampler, RejectsBadLogitsPositionsAndTokens) {
  const SamplingParams p = make_params(1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_THROW(sample(std::vector<float>{}, p, 0, 0), Error);
  EXPECT_THROW(sample(std::vector<float>{1.0f, nan}, p, 0, 0), Error);
  EXPECT_THROW(sample(std::vector<float>{1.0f, inf}, p, 0, 0), Error);
  EXPECT_THROW(sample(std::vector<float>{kNegInf, kNegInf}, p, 0, 0), Error);
  EXPECT_THROW(sample(std::vector<float>{1.0f}, p, -1, 0), Error);
  EXPECT_THROW(sample(std::vector<float>{1.0f}, p, int64_t{1} << 32, 0), Error);
  EXPECT_NO_THROW(sample(std::vector<float>{1.0f}, p, (int64_t{1} << 32) - 1, 0));
  SamplingParams bad = p;
  bad.temperature = -1.0f;
  EXPECT_THROW(sample(std::vector<float>{1.0f}, bad, 0, 0), Error);
  EXPECT_THROW(logprob_of(std::vector<float>{1.0f, 2.0f}, 2), Error);
  EXPECT_THROW(logprob_of(std::vector<float>{1.0f, 2.0f}, -1), Error);
  EXPECT_THROW(logprob_of(std::vector<float>{nan}, 0), Error);
  EXPECT_THROW(top_logprobs(std::vector<float>{1.0f}, -1), Error);
}

TEST(Sampler, ScoringRowsNeedTemperatureZeroAndATokenInTheVocab) {
  SampleRowParams row;
  row.temperature = 0.0f;
  row.score_token = 1;
  EXPECT_EQ(sample_row(std::vector<float>{3.0f, 1.0f}, row).token, 1);
  row.score_token = 2;
  EXPECT_THROW(sample_row(std::vector<float>{3.0f, 1.0f}, row), Error);
  row.score_token = -2;
  EXPECT_THROW(row.validate(), Error);
  row.score_token = 0;
  row.temperature = 0.5f;
  try {
    row.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("score_token"), std::string::npos) << e.what();
  }
}

// ---- The sampler's own exp and log ----

int64_t ulp_distance(double a, double b) {
  const int64_t x = std::bit_cast<int64_t>(a), y = std::bit_cast<int64_t>(b);
  return x > y ? x - y : y - x;  // both of one sign here
}

TEST(SamplerMath, ExpWithinOneUlpOfLibm) {
  TestRng rng(9);
  int64_t worst = 0;
  for (int i = 0; i < 300000; ++i) {
    const double scale = i % 3 == 0 ? 745.0 : i % 3 == 1 ? 40.0 : 1.0;
    const double x = -(static_cast<double>(rng.bits()) * 0x1p-32 + rng.uniform() * 0x1p-32) * scale;
    worst = std::max(worst, ulp_distance(sampler_exp(x), std::exp(x)));
  }
  EXPECT_LE(worst, 1);
  EXPECT_EQ(sampler_exp(0.0), 1.0);
  EXPECT_EQ(sampler_exp(-0.0), 1.0);
  EXPECT_EQ(sampler_exp(-std::numeric_limits<double>::infinity()), 0.0);
  EXPECT_EQ(sampler_exp(-746.0), 0.0);
  EXPECT_EQ(sampler_exp(-1e300), 0.0);
  EXPECT_EQ(sampler_exp(-745.0), 0x1p-1074);  // the smallest subnormal
}

TEST(SamplerMath, LogWithinOneUlpOfLibm) {
  TestRng rng(10);
  int64_t worst = 0;
  for (int i = 0; i < 300000; ++i) {
    const double x =
        i % 2 ? 1.0 + rng.uniform() * 200000.0
              : std::ldexp(1.0 + rng.uniform(), static_cast<int>(rng.below(2000)) - 1000);
    worst = std::max(worst, ulp_distance(sampler_log(x), std::log(x)));
  }
  EXPECT_LE(worst, 1);
  EXPECT_EQ(sampler_log(1.0), 0.0);
  EXPECT_LE(ulp_distance(sampler_log(0x1p-1074), std::log(0x1p-1074)), 1);  // subnormal
  EXPECT_LE(ulp_distance(sampler_log(1e-45), std::log(1e-45)), 1);
}

TEST(SamplerMath, BitsArePinned) {
  // Changing these functions changes every seeded output: do it only on purpose, and update
  // these values with the numerics fingerprint.
  EXPECT_EQ(std::bit_cast<uint64_t>(sampler_exp(-1.0)), 0x3fd78b56362cef38ULL);
  EXPECT_EQ(std::bit_cast<uint64_t>(sampler_exp(-20.5)), 0x3e157a3afeed00acULL);
  EXPECT_EQ(std::bit_cast<uint64_t>(sampler_log(10.0)), 0x40026bb1bbb55516ULL);
  EXPECT_EQ(std::bit_cast<uint64_t>(sampler_log(152064.0)), 0x4027dd368b4d6f8dULL);
}

TEST(Sampler, SeededTokensArePinned) {
  // The keying scheme (seed, position, sample index -> Philox counter) is part of the
  // contract: a change here breaks the replay of every stored response.
  const std::vector<float> logits = {0.5f, 1.0f, -0.25f, 2.0f, 0.0f, 1.5f, -1.0f, 0.75f};
  SamplingParams p = make_params(1.0f, 0x5eed);
  std::vector<int32_t> tokens;
  for (int64_t pos = 0; pos < 16; ++pos) tokens.push_back(sample(logits, p, pos, pos % 2).token);
  EXPECT_EQ(tokens, (std::vector<int32_t>{5, 5, 3, 3, 3, 5, 3, 2, 3, 1, 2, 1, 3, 5, 5, 3}));
}

// ---- Fast path == reference ----

std::vector<float> random_logits(TestRng& rng, size_t vocab) {
  std::vector<float> logits(vocab);
  const size_t kind = rng.below(7);
  for (size_t i = 0; i < vocab; ++i) {
    const double u = rng.uniform();
    switch (kind) {
      case 0:  // spread
        logits[i] = static_cast<float>(u * 20.0 - 10.0);
        break;
      case 1:  // many ties
        logits[i] = static_cast<float>(std::floor(u * 6.0));
        break;
      case 2:  // nearly flat
        logits[i] = static_cast<float>(u * 0.01);
        break;
      case 3:  // a quarter masked
        logits[i] = rng.below(4) == 0 ? kNegInf : static_cast<float>(u * 5.0);
        break;
      case 4:  // ascending with ties: the worst case of the first-chunk selection
        logits[i] = static_cast<float>(i / 3) * 0.01f;
        break;
      case 6:  // mostly masked, the rest tied
        logits[i] = rng.below(20) == 0 ? 0.5f : kNegInf;
        break;
      default:  // peaked
        logits[i] = static_cast<float>(-u * u * 60.0);
        break;
    }
    if (rng.below(50) == 0) logits[i] = rng.below(2) ? 0.0f : -0.0f;  // signed zeros
  }
  if (kind == 3 || kind == 6) logits[rng.below(vocab)] = 1.0f;  // at least one finite
  return logits;
}

SamplingParams random_params(TestRng& rng, size_t vocab) {
  static const float kTemperatures[] = {0.0f, 1.0f, 1.0f, 0.7f, 1.3f, 0.05f, 4.0f, 1e-20f};
  static const float kTopP[] = {1.0f, 1.0f, 0.95f, 0.5f, 0.1f, 1e-6f, 0.999999f};
  static const float kMinP[] = {0.0f, 0.0f, 0.05f, 0.3f, 1.0f, 1e-6f};
  SamplingParams p;
  p.temperature = kTemperatures[rng.below(std::size(kTemperatures))];
  const size_t k_kind = rng.below(6);
  p.top_k = k_kind == 0   ? -1
            : k_kind == 1 ? static_cast<int32_t>(1 + rng.below(vocab))
            : k_kind == 2 ? static_cast<int32_t>(vocab + rng.below(3))
            : k_kind == 3 ? static_cast<int32_t>(1 + rng.below(std::min<size_t>(vocab, 100)))
                          : 0;
  p.top_p = kTopP[rng.below(std::size(kTopP))];
  p.min_p = kMinP[rng.below(std::size(kMinP))];
  p.seed = (static_cast<uint64_t>(rng.bits()) << 32) | rng.bits();
  p.n_logprobs = static_cast<int32_t>(rng.below(21));
  return p;
}

void expect_same(const SampleResult& fast, const SampleResult& ref, const std::string& where) {
  EXPECT_EQ(fast.token, ref.token) << where;
  EXPECT_EQ(bits_of(fast.logprob), bits_of(ref.logprob)) << where;
  ASSERT_EQ(fast.top_logprobs.size(), ref.top_logprobs.size()) << where;
  for (size_t i = 0; i < fast.top_logprobs.size(); ++i) {
    EXPECT_EQ(fast.top_logprobs[i].token, ref.top_logprobs[i].token) << where << " top " << i;
    EXPECT_EQ(bits_of(fast.top_logprobs[i].logprob), bits_of(ref.top_logprobs[i].logprob))
        << where << " top " << i;
  }
}

TEST(Sampler, FastPathMatchesReferenceOnRandomCases) {
  TestRng rng(7);
  static const size_t kVocabs[] = {1,   2,   3,   7,   63,   64,   65,   129,
                                   255, 256, 257, 513, 1000, 1023, 1025, 4099};
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t vocab = kVocabs[rng.below(std::size(kVocabs))];
    const std::vector<float> logits = random_logits(rng, vocab);
    const SamplingParams params = random_params(rng, vocab);
    const int64_t position = static_cast<int64_t>(rng.below(100000));
    const uint32_t index = static_cast<uint32_t>(rng.below(4));
    const std::string where =
        "trial " + std::to_string(trial) + " vocab " + std::to_string(vocab) + " T " +
        std::to_string(params.temperature) + " top_k " + std::to_string(params.top_k) + " top_p " +
        std::to_string(params.top_p) + " min_p " + std::to_string(params.min_p);
    expect_same(sample(logits, params, position, index),
                sample_reference(logits, params, position, index), where);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(Sampler, FastPathMatchesReferenceAtFullVocabSize) {
  // A Qwen-sized vocab, each filter alone and all together; also reports the fast path's cost.
  constexpr size_t kVocab = 152064;
  TestRng rng(8);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = static_cast<float>(-std::pow(rng.uniform(), 0.3) * 25.0);
  logits[123] = 3.0f;
  logits[99999] = 3.0f;
  struct Case {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
  };
  for (const Case& c :
       {Case{1.0f, 0, 1.0f, 0.0f}, Case{0.7f, 0, 1.0f, 0.0f}, Case{0.8f, 50, 1.0f, 0.0f},
        Case{1.0f, 0, 0.9f, 0.0f}, Case{1.2f, 0, 1.0f, 0.05f}, Case{0.9f, 40, 0.95f, 0.02f},
        Case{0.0f, 0, 1.0f, 0.0f}}) {
    SamplingParams p = make_params(c.temperature, 2024);
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.n_logprobs = 5;
    const auto start = std::chrono::steady_clock::now();
    constexpr int kRepeats = 5;
    std::vector<SampleResult> fast;
    for (int pos = 0; pos < kRepeats; ++pos) fast.push_back(sample(logits, p, pos, 0));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count() /
        kRepeats;
    std::printf("vocab %zu T %.2f top_k %d top_p %.2f min_p %.2f: %.3f ms per sample\n", kVocab,
                c.temperature, c.top_k, c.top_p, c.min_p, ms);
    for (int pos = 0; pos < 2; ++pos) {
      expect_same(fast[static_cast<size_t>(pos)], sample_reference(logits, p, pos, 0),
                  "T " + std::to_string(c.temperature));
    }
  }
}

TEST(Sampler, OpsSampleRowsHostDefaultEqualsSample) {
  // Rows of one call with different params and vocab 777 (not a multiple of any block).
  TestRng rng(21);
  constexpr size_t kVocab = 777, kRows = 40;
  std::vector<float> logits;
  std::vector<SampleRowParams> params;
  for (size_t r = 0; r < kRows; ++r) {
    const std::vector<float> row = random_logits(rng, kVocab);
    logits.insert(logits.end(), row.begin(), row.end());
    params.push_back(
        sample_row_params(random_params(rng, kVocab), static_cast<uint32_t>(rng.below(1000)), 0));
  }
  auto ops = kernels::make_cpu_ops(1);  // the host default (the reference backend has its own)
  std::vector<SampleRowResult> out(kRows);
  ops->sample_rows(logits.data(), kRows, kVocab, params.data(), out.data());
  for (size_t r = 0; r < kRows; ++r) {
    const std::span<const float> row(logits.data() + r * kVocab, kVocab);
    const SampleResult want = sample(row, params[r], params[r].position, 0);
    EXPECT_EQ(out[r].token, want.token) << r;
    EXPECT_EQ(bits_of(out[r].logprob), bits_of(want.logprob)) << r;
    ASSERT_EQ(out[r].n_top, static_cast<int32_t>(want.top_logprobs.size())) << r;
    for (size_t j = 0; j < want.top_logprobs.size(); ++j) {
      EXPECT_EQ(out[r].top_tokens[j], want.top_logprobs[j].token);
      EXPECT_EQ(bits_of(out[r].top_logprobs[j]), bits_of(want.top_logprobs[j].logprob));
    }
  }
  std::vector<float> bad(kVocab, kNegInf);
  EXPECT_THROW(ops->sample_rows(bad.data(), 1, kVocab, params.data(), out.data()), Error);
}

}  // namespace
}  // namespace detllm
