// ThreadPool: parallel_for covers every item exactly once with the documented static
// partition, propagates exceptions, runs nested calls inline, and survives many tiny jobs.
// Run: build-kern/tests/test_kernels --gtest_filter='ThreadPool*'.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace detllm {
namespace {

TEST(ThreadPool, CoversEveryItemOnceWithStaticParts) {
  for (int n_threads : {1, 2, 3, 5}) {
    ThreadPool pool(n_threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> parts{0};
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        const int P = static_cast<int>(std::min<int64_t>(n_threads, n));
        bool is_part = false;  // [b, e) must be one part of the documented partition
        for (int p = 0; p < P; ++p)
          is_part |=
              ThreadPool::part_begin(n, P, p) == b && ThreadPool::part_begin(n, P, p + 1) == e;
        EXPECT_TRUE(is_part) << b << ".." << e;
        parts.fetch_add(1);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1);
      EXPECT_EQ(parts.load(), std::min<int64_t>(n_threads, n));
    }
  }
}

TEST(ThreadPool, MinItemsPerPartLimitsParts) {
  ThreadPool pool(4);
  std::atomic<int> parts{0};
  pool.parallel_for(
      100, [&](int64_t, int64_t) { parts.fetch_add(1); }, 60);
  EXPECT_EQ(parts.load(), 2);
}

TEST(ThreadPool, RethrowsAndStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(9,
                                 [](int64_t b, int64_t) {
                                   if (b > 0) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 45);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(2, [&](int64_t, int64_t) {
    pool.parallel_for(10, [&](int64_t b, int64_t e) { inner += static_cast<int>(e - b); });
  });
  EXPECT_EQ(inner.load(), 20);
}

TEST(ThreadPool, ManyTinyJobs) {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  for (int rep = 0; rep < 5000; ++rep)
    pool.parallel_for(4, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 20000);
}

TEST(ThreadPool, RejectsBadThreadCount) {
  EXPECT_ANY_THROW(ThreadPool(0));
}

}  // namespace
}  // namespace detllm
