// The n-gram prompt-lookup drafter (engine/ngram_drafter.h): the longest suffix in
// [min_n, max_n], its most recent earlier occurrence, the k tokens that follow it (its period
// repeated past the end).
#include "engine/ngram_drafter.h"

#include <gtest/gtest.h>

#include <vector>

namespace detllm::engine {
namespace {

std::vector<int32_t> drafts(const std::vector<int32_t>& tokens, int32_t min_n, int32_t max_n,
                            int32_t k) {
  return propose_ngram_drafts(tokens, NgramDrafterConfig{min_n, max_n}, k);
}

TEST(NgramDrafter, ProposesWhatFollowedTheSuffix) {
  //                      0  1  2  3  4  5  6  7  8
  const std::vector<int32_t> x{1, 2, 3, 4, 5, 9, 1, 2, 3};
  EXPECT_EQ(drafts(x, 1, 3, 2), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(drafts(x, 1, 3, 4), (std::vector<int32_t>{4, 5, 9, 1}));
  // Past the end of x the match's period (6) repeats: 4 5 9 1 2 3 | 4 5 9 1.
  EXPECT_EQ(drafts(x, 1, 3, 10), (std::vector<int32_t>{4, 5, 9, 1, 2, 3, 4, 5, 9, 1}));
}

TEST(NgramDrafter, LongestSuffixWinsOverTheMostRecent) {
  // Suffix "7 8": "8" alone last occurred at 4 (followed by 5), "7 8" at 0-1 (followed by 2).
  const std::vector<int32_t> x{7, 8, 2, 6, 8, 5, 7, 8};
  EXPECT_EQ(drafts(x, 1, 2, 1), (std::vector<int32_t>{2}));
  EXPECT_EQ(drafts(x, 1, 1, 1), (std::vector<int32_t>{5}));  // max_n 1: only "8" compared
}

TEST(NgramDrafter, TiesGoToTheMostRecentOccurrence) {
  const std::vector<int32_t> x{3, 1, 3, 2, 3};
  EXPECT_EQ(drafts(x, 1, 4, 1), (std::vector<int32_t>{2}));  // "3" at 2, not at 0
}

TEST(NgramDrafter, LengthsAboveMaxNTieAtMaxN) {
  // "1 2 1 2" repeats: every occurrence matches at least max_n = 2; the latest one wins.
  const std::vector<int32_t> x{1, 2, 1, 2, 1, 2};
  EXPECT_EQ(drafts(x, 1, 2, 3), (std::vector<int32_t>{1, 2, 1}));  // from end 3: x[4, 6), 1
}

TEST(NgramDrafter, RepeatedTokenProposesMoreOfItself) {
  const std::vector<int32_t> x{4, 4, 4};
  EXPECT_EQ(drafts(x, 1, 3, 5), (std::vector<int32_t>{4, 4, 4, 4, 4}));  // end 1: x[2], then 4s
}

TEST(NgramDrafter, NothingBelowMinN) {
  const std::vector<int32_t> x{1, 2, 3, 9, 3};
  EXPECT_EQ(drafts(x, 1, 3, 2), (std::vector<int32_t>{9, 3}));
  EXPECT_TRUE(drafts(x, 2, 3, 2).empty());  // "9 3" never occurred before
}

TEST(NgramDrafter, NoDraftsWithoutAnEarlierOccurrenceOrBudget) {
  EXPECT_TRUE(drafts({1, 2, 3, 4}, 1, 3, 4).empty());
  EXPECT_TRUE(drafts({5}, 1, 3, 4).empty());
  EXPECT_TRUE(drafts({}, 1, 3, 4).empty());
  EXPECT_TRUE(drafts({1, 2, 1}, 1, 3, 0).empty());
}

TEST(NgramDrafter, IsAPureFunctionOfTheTokens) {
  std::vector<int32_t> x;
  for (int i = 0; i < 200; ++i) x.push_back((i * 7) % 13);
  const auto a = drafts(x, 2, 5, 6);
  EXPECT_EQ(a, drafts(x, 2, 5, 6));
  EXPECT_EQ(a.size(), 6u);
}

}  // namespace
}  // namespace detllm::engine
