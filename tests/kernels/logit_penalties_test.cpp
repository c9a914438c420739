// Logit penalties (kernels/sampling/logit_penalties.h): the formula on hand-made rows (which
// tokens count, the order bias -> repetition -> frequency -> presence, -inf kept), entries
// built from a history against the whole-row reference bit for bit on random data, the host
// default of Ops::apply_logit_penalties on the ref and CPU backends, and validation errors.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/sampling/logit_penalties.h"
#include "kernels/sampling/sampling_params.h"

namespace detllm {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// build_logit_penalties + apply on one row.
std::vector<float> penalize(std::vector<float> logits, const SamplingParams& p,
                            const std::vector<int32_t>& history, int32_t n_prompt) {
  std::vector<LogitPenalty> entries;
  std::vector<int64_t> scratch;
  build_logit_penalties(p, history, n_prompt, 0, entries, scratch);
  apply_logit_penalties_host(logits.data(), 1, static_cast<int32_t>(logits.size()), entries);
  return logits;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b;
  for (float x : v) b.push_back(std::bit_cast<uint32_t>(x));
  return b;
}

TEST(LogitPenalties, RepetitionDividesPositiveAndMultipliesOthersOverPromptAndGenerated) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  // prompt [0, 1], generated [2]; token 3 never seen.
  const auto out = penalize({2.0f, -2.0f, 0.0f, 1.0f}, p, {0, 1, 2}, 2);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -4.0f, 0.0f, 1.0f}));
}

TEST(LogitPenalties, FrequencyAndPresenceCountOnlyGeneratedTokens) {
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 1.0f;
  // prompt [0, 0, 3], generated [3, 3, 1]: token 0 is only in the prompt (no penalty), token
  // 3 was generated twice (its prompt occurrence does not count), token 1 once.
  const auto out = penalize({4.0f, 4.0f, 4.0f, 4.0f}, p, {0, 0, 3, 3, 3, 1}, 3);
  EXPECT_EQ(out, (std::vector<float>{4.0f, 4.0f - 0.5f - 1.0f, 4.0f, 4.0f - 1.0f - 1.0f}));
}

TEST(LogitPenalties, BiasComesBeforeRepetition) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.logit_bias = {{1, 3.0f}, {2, -1.0f}};
  // token 1 seen: (-2 + 3) = 1 > 0, divided: 0.5. token 2 not seen: bias only.
  const auto out = penalize({0.0f, -2.0f, 5.0f}, p, {1}, 1);
  EXPECT_EQ(out, (std::vector<float>{0.0f, 0.5f, 4.0f}));
}

TEST(LogitPenalties, ProductIsRoundedBeforeTheSubtraction) {
  SamplingParams p;
  p.frequency_penalty = 0.1f;
  const float x = 1.0f;
  const auto out = penalize({x, 0.0f}, p, {0, 0, 0}, 0);  // c = 3
  const float product = 0.1f * 3.0f;                      // rounded to fp32 first
  EXPECT_EQ(std::bit_cast<uint32_t>(out[0]), std::bit_cast<uint32_t>(x - product));
}

TEST(LogitPenalties, MaskedLogitsStayMasked) {
  SamplingParams p;
  p.repetition_penalty = 1.5f;
  p.frequency_penalty = -2.0f;
  p.presence_penalty = -2.0f;
  p.logit_bias = {{0, 100.0f}};
  const auto out = penalize({kNegInf, kNegInf}, p, {0, 1, 1}, 1);
  EXPECT_EQ(out[0], kNegInf);
  EXPECT_EQ(out[1], kNegInf);
}

TEST(LogitPenalties, NoPenaltiesNoEntries) {
  SamplingParams p;
  std::vector<LogitPenalty> entries;
  std::vector<int64_t> scratch;
  build_logit_penalties(p, std::vector<int32_t>{1, 2, 3}, 1, 0, entries, scratch);
  EXPECT_TRUE(entries.empty());
  p.repetition_penalty = 1.0f;
  p.frequency_penalty = 0.5f;  // prompt-only tokens are untouched by frequency
  build_logit_penalties(p, std::vector<int32_t>{1, 2, 3}, 3, 0, entries, scratch);
  EXPECT_TRUE(entries.empty());
}

TEST(LogitPenalties, EntriesAreAscendingAndUniquePerRow) {
  SamplingParams p;
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.2f;
  p.logit_bias = {{2, 1.0f}, {9, -1.0f}};
  std::vector<LogitPenalty> entries;
  std::vector<int64_t> scratch;
  build_logit_penalties(p, std::vector<int32_t>{7, 2, 7, 5, 2, 2}, 2, 4, entries, scratch);
  build_logit_penalties(p, std::vector<int32_t>{1}, 1, 5, entries, scratch);
  // row 4: prompt [7, 2], generated [7, 5, 2, 2]: 2, 5, 7 seen (repetition), 2 and 9 biased.
  // row 5: prompt [1]: 1 seen, 2 and 9 biased.
  std::vector<std::pair<int32_t, int32_t>> keys;
  std::vector<int32_t> counts;
  for (const auto& e : entries) {
    keys.emplace_back(e.row, e.token);
    counts.push_back(e.n_generated);
  }
  EXPECT_EQ(keys, (std::vector<std::pair<int32_t, int32_t>>{
                      {4, 2}, {4, 5}, {4, 7}, {4, 9}, {5, 1}, {5, 2}, {5, 9}}));
  EXPECT_EQ(counts, (std::vector<int32_t>{2, 1, 1, 0, 0, 0, 0}));
  EXPECT_NO_THROW(check_logit_penalties(6, 10, entries));
}

// Random rows, histories and parameters: build + apply equals the whole-row reference.
TEST(LogitPenalties, MatchesTheWholeRowReferenceBitForBit) {
  std::mt19937 rng(1234);
  auto uniform = [&](float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(rng() >> 8) * 0x1p-24f;
  };
  constexpr int32_t kVocab = 300;
  for (int round = 0; round < 300; ++round) {
    std::vector<float> logits(kVocab);
    for (auto& x : logits) {
      const uint32_t kind = rng() % 16;
      x = kind == 0 ? kNegInf : kind == 1 ? 0.0f : kind == 2 ? -0.0f : uniform(-30.0f, 30.0f);
    }
    const int32_t n_prompt = static_cast<int32_t>(rng() % 40);
    const int32_t n_generated = static_cast<int32_t>(rng() % 40);
    const int32_t range = 1 + static_cast<int32_t>(rng() % kVocab);  // small ranges repeat
    std::vector<int32_t> history;
    for (int32_t i = 0; i < n_prompt + n_generated; ++i) {
      history.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(range)));
    }
    SamplingParams p;
    if (rng() % 2) p.repetition_penalty = uniform(0.05f, 3.0f);
    if (rng() % 2) p.frequency_penalty = uniform(-2.0f, 2.0f);
    if (rng() % 2) p.presence_penalty = uniform(-2.0f, 2.0f);
    if (rng() % 2) {
      for (int32_t t = 0; t < kVocab; ++t) {
        if (rng() % 10 == 0) p.logit_bias.push_back({t, uniform(-100.0f, 100.0f)});
      }
    }
    p.validate(kVocab);
    std::vector<float> want = logits;
    penalize_row_reference(want, p, history, n_prompt);
    EXPECT_EQ(bits(penalize(logits, p, history, n_prompt)), bits(want)) << "round " << round;
  }
}

// The host default of Ops::apply_logit_penalties on several rows, on the ref and CPU
// backends: the same bits as the entries applied one row at a time.
TEST(LogitPenalties, OpsHostDefaultOnEveryHostBackend) {
  constexpr int32_t kVocab = 50;
  constexpr int32_t kRows = 3;
  std::vector<float> logits(kRows * kVocab);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 17) - 8.25f;
  SamplingParams p;
  p.repetition_penalty = 1.7f;
  p.frequency_penalty = 0.3f;
  p.presence_penalty = 0.6f;
  p.logit_bias = {{3, 2.5f}, {49, -7.0f}};
  std::vector<LogitPenalty> entries;
  std::vector<int64_t> scratch;
  std::vector<float> want = logits;
  const std::vector<std::vector<int32_t>> histories = {{1, 2, 3}, {4, 4, 4, 40}, {49}};
  for (int32_t r = 0; r < kRows; ++r) {
    build_logit_penalties(p, histories[r], 1, r, entries, scratch);
    penalize_row_reference(std::span(want).subspan(r * kVocab, kVocab), p, histories[r], 1);
  }
  for (auto& ops : {kernels::make_ref_ops(), kernels::make_cpu_ops(2)}) {
    std::vector<float> got = logits;
    ops->apply_logit_penalties(got.data(), kRows, kVocab, entries.data(),
                               static_cast<int32_t>(entries.size()));
    EXPECT_EQ(bits(got), bits(want)) << ops->name();
  }
}

TEST(LogitPenalties, BadEntriesAreRefused) {
  std::vector<float> logits(20, 0.0f);
  auto ops = kernels::make_cpu_ops(1);
  auto apply = [&](std::vector<LogitPenalty> e) {
    ops->apply_logit_penalties(logits.data(), 2, 10, e.data(), static_cast<int32_t>(e.size()));
  };
  LogitPenalty a;
  a.row = 0;
  a.token = 3;
  LogitPenalty b = a;
  EXPECT_THROW(apply({a, b}), Error);  // (row, token) twice
  b.token = 2;
  EXPECT_THROW(apply({a, b}), Error);  // descending
  b.token = 10;
  EXPECT_THROW(apply({a, b}), Error);  // token outside the vocabulary
  b.token = 1;
  b.row = 2;
  EXPECT_THROW(apply({a, b}), Error);  // row outside the call
  b.row = -1;
  EXPECT_THROW(apply({b}), Error);
  b.row = 1;
  EXPECT_NO_THROW(apply({a, b}));
}

void expect_invalid(const SamplingParams& p, const std::string& needle, int32_t vocab = 100) {
  try {
    p.validate(vocab);
    ADD_FAILURE() << "accepted; expected an error naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(LogitPenalties, ValidationNamesTheFieldAndTheRange) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float v : {2.5f, -2.01f, nan}) {
    SamplingParams p;
    p.presence_penalty = v;
    expect_invalid(p, "presence_penalty must be in [-2, 2]");
    SamplingParams q;
    q.frequency_penalty = v;
    expect_invalid(q, "frequency_penalty must be in [-2, 2]");
  }
  for (float v : {0.0f, -1.0f, 100.5f, nan, std::numeric_limits<float>::infinity()}) {
    SamplingParams p;
    p.repetition_penalty = v;
    expect_invalid(p, "repetition_penalty must be in (0, 100]");
  }
  SamplingParams p;
  p.logit_bias = {{5, 1.0f}, {5, 2.0f}};
  expect_invalid(p, "strictly ascending");
  p.logit_bias = {{6, 1.0f}, {5, 2.0f}};
  expect_invalid(p, "strictly ascending");
  p.logit_bias = {{-1, 1.0f}};
  expect_invalid(p, "negative");
  p.logit_bias = {{1, 100.5f}};
  expect_invalid(p, "must be in [-100, 100]");
  p.logit_bias = {{100, 1.0f}};
  expect_invalid(p, "outside the vocabulary (0…99)");
  p.logit_bias.clear();
  for (int32_t t = 0; t <= SamplingParams::kMaxLogitBias; ++t) p.logit_bias.push_back({t, 1.0f});
  expect_invalid(p, "at most 1024", 5000);
  p.logit_bias.pop_back();
  EXPECT_NO_THROW(p.validate(5000));
}

}  // namespace
}  // namespace detllm
