// The bench's warm-up workload and the median of repeated runs (src/bench/warmup_repeat.h).
#include <gtest/gtest.h>

#include "bench/warmup_repeat.h"
#include "core/error.h"

namespace detllm::bench {
namespace {

TEST(BenchWarmup, FirstMaxSeqsRequestsWithShortOutputs) {
  Workload w;
  w.name = "fixed";
  for (int i = 0; i < 10; ++i) w.requests.push_back({{1, 2, i}, i == 3 ? 4 : 100 + i});
  const Workload head = warmup_workload(w, 6);
  ASSERT_EQ(head.requests.size(), 6u);
  for (size_t i = 0; i < head.requests.size(); ++i) {
    EXPECT_EQ(head.requests[i].prompt, w.requests[i].prompt);  // the workload's own prompts
    EXPECT_EQ(head.requests[i].output_len, i == 3 ? 4 : kWarmupOutputTokens);
  }
  EXPECT_EQ(warmup_workload(w, 256).requests.size(), 10u);  // fewer requests than max_seqs
  EXPECT_EQ(head.name, w.name);
}

TEST(BenchWarmup, BothNumericsUnlessFast) {
  EXPECT_EQ(warmup_shares(DeterminismMode::kFast), std::vector<double>{0.0});
  for (DeterminismMode m : {DeterminismMode::kInvariant, DeterminismMode::kBiNaive,
                            DeterminismMode::kPadded, DeterminismMode::kVerified}) {
    EXPECT_EQ(warmup_shares(m), (std::vector<double>{0.0, 100.0}));
  }
}

RunResult run_of(double duration, int64_t steps) {
  RunResult r;
  r.duration_s = duration;
  r.n_steps = steps;
  return r;
}

TEST(BenchRepeat, MedianRunKeepsEveryDuration) {
  const RunResult m = median_run({run_of(3.0, 1), run_of(1.0, 2), run_of(2.0, 3)});
  EXPECT_EQ(m.n_steps, 3);                                                // the 2.0 s run, whole
  EXPECT_EQ(m.repeat_durations_s, (std::vector<double>{3.0, 1.0, 2.0}));  // run order
  // Even count: the lower middle.
  EXPECT_EQ(median_run({run_of(4.0, 1), run_of(1.0, 2), run_of(3.0, 3), run_of(2.0, 4)}).n_steps,
            4);
  const RunResult one = median_run({run_of(5.0, 7)});
  EXPECT_EQ(one.n_steps, 7);
  EXPECT_TRUE(one.repeat_durations_s.empty());
  EXPECT_THROW(median_run({}), Error);
}

}  // namespace
}  // namespace detllm::bench
