// parallel_each (core/parallel.h): every job runs exactly once, whatever the thread cap; the
// exception of the lowest failing index is the one rethrown; zero jobs is a no-op.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/parallel.h"

namespace detllm {
namespace {

TEST(ParallelEach, EveryJobRunsOnce) {
  for (size_t cap : {1, 2, 7, 64}) {
    std::vector<std::atomic<int>> runs(1000);
    parallel_each(runs.size(), cap, [&](size_t i) { ++runs[i]; });
    for (size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i].load(), 1) << i << " cap " << cap;
  }
  parallel_each(0, 4, [](size_t) { FAIL() << "no job to run"; });
}

TEST(ParallelEach, RethrowsTheLowestFailingIndex) {
  std::atomic<int> ran{0};
  try {
    parallel_each(100, 8, [&](size_t i) {
      ++ran;
      if (i == 70 || i == 30) throw std::runtime_error("job " + std::to_string(i));
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "job 30");
  }
  EXPECT_EQ(ran.load(), 100);  // the other jobs still ran
}

}  // namespace
}  // namespace detllm
