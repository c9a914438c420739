// The invariant GEMM's M buckets (kernels/gemm_buckets.h), CPU only: the sequence itself, that
// every m has exactly one bucket and lies in (below, bucket], that no bucket is more than 1.25×
// the one below from 128 on, that a plan's sweep covers both ends of every tile count, and
// that bad input is refused.
// Run: build/tests/test_kernels --gtest_filter='GemmBuckets*'
#include "kernels/gemm_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "core/error.h"

namespace detllm::kernels {
namespace {

std::vector<int32_t> all_buckets() {
  std::vector<int32_t> out;
  for (int32_t b = 1; b <= kGemmMaxBucket; b = gemm_bucket_above(b)) out.push_back(b);
  return out;
}

TEST(GemmBuckets, TheSequence) {
  const std::vector<int32_t> b = all_buckets();
  const std::vector<int32_t> head = {1,   2,   4,   8,   16,  32,  64,  128, 160,
                                     192, 224, 256, 320, 384, 448, 512, 640};
  ASSERT_GT(b.size(), head.size());
  EXPECT_EQ(std::vector<int32_t>(b.begin(), b.begin() + static_cast<long>(head.size())), head);
  EXPECT_EQ(b.back(), kGemmMaxBucket);
  EXPECT_EQ(b.size(), 8u + 4u * 6u);  // 1 … 128, then 4 a doubling up to 8192
  EXPECT_EQ(gemm_bucket_above(kGemmMaxBucket), kGemmMaxBucket + 1);
}

TEST(GemmBuckets, EveryMHasOneBucketThatCoversIt) {
  for (int32_t m = 1; m <= kGemmMaxBucket + 100; ++m) {
    const int32_t b = gemm_bucket(m);
    ASSERT_TRUE(is_gemm_bucket(b)) << m;
    if (m <= kGemmMaxBucket) {
      ASSERT_GE(b, m);
      ASSERT_LT(gemm_bucket_below(b), m) << "m " << m << " bucket " << b;
    } else {
      ASSERT_EQ(b, kGemmMaxBucket);
    }
  }
}

TEST(GemmBuckets, BelowAndAboveAreInverse) {
  int32_t n = 0;
  for (int32_t b = 1; b <= kGemmMaxBucket; ++b) {
    if (!is_gemm_bucket(b)) continue;
    ++n;
    if (b < kGemmMaxBucket) {
      EXPECT_EQ(gemm_bucket_below(gemm_bucket_above(b)), b) << b;
    }
    if (b > 1) {
      EXPECT_EQ(gemm_bucket_above(gemm_bucket_below(b)), b) << b;
    }
    if (b > 128) {
      EXPECT_LE(4 * b, 5 * gemm_bucket_below(b)) << b;  // ≤ 1.25× the one below
    }
  }
  EXPECT_EQ(static_cast<size_t>(n), all_buckets().size());
  EXPECT_EQ(gemm_bucket_below(1), 0);
}

TEST(GemmBuckets, RefusesWhatIsNotABucket) {
  EXPECT_FALSE(is_gemm_bucket(0));
  EXPECT_FALSE(is_gemm_bucket(3));
  EXPECT_FALSE(is_gemm_bucket(200));
  EXPECT_FALSE(is_gemm_bucket(288));
  EXPECT_FALSE(is_gemm_bucket(16384));
  EXPECT_TRUE(is_gemm_bucket(288 + 32));
  EXPECT_THROW(gemm_bucket(0), Error);
  EXPECT_THROW(gemm_bucket_below(200), Error);
  EXPECT_THROW(gemm_bucket_above(3), Error);
}

// The sweep list: in range, sorted, unique; lo, hi and every small m; and for every tile count
// ceil(m / granule) met in [lo, hi], its first and its last m there.
TEST(GemmBuckets, TheSweepCoversBothEndsOfEveryTileCount) {
  for (int32_t b = 1; b <= kGemmMaxBucket; b = gemm_bucket_above(b)) {
    const int32_t lo = gemm_bucket_below(b) + 1;
    for (int32_t g : {1, 7, 8, 24, 64, 128, 192, 256, 768, 1024}) {
      const std::vector<int32_t> ms = gemm_sweep_ms(lo, b, g);
      ASSERT_FALSE(ms.empty());
      EXPECT_EQ(ms.front(), lo);
      EXPECT_EQ(ms.back(), b);
      for (size_t i = 1; i < ms.size(); ++i) ASSERT_LT(ms[i - 1], ms[i]) << b << " " << g;
      std::map<int32_t, std::pair<int32_t, int32_t>> ends;  // tile count → (first, last m)
      for (int32_t m = lo; m <= b; ++m) {
        const int32_t t = (m + g - 1) / g;
        auto [it, fresh] = ends.try_emplace(t, m, m);
        if (!fresh) it->second.second = m;
      }
      auto has = [&](int32_t m) { return std::binary_search(ms.begin(), ms.end(), m); };
      for (const auto& [t, fl] : ends) {
        EXPECT_TRUE(has(fl.first)) << "bucket " << b << " granule " << g << " m " << fl.first;
        EXPECT_TRUE(has(fl.second)) << "bucket " << b << " granule " << g << " m " << fl.second;
      }
      for (int32_t m = lo; m <= std::min(b, kGemmSweepEveryMUpTo); ++m) EXPECT_TRUE(has(m)) << m;
      if (g == 1) {
        EXPECT_EQ(ms.size(), size_t(b - lo + 1)) << b;
      }
    }
  }
  // What it saves: bucket (4096, 5120] with 128-row tiles is 16 launches, not 1024.
  EXPECT_EQ(gemm_sweep_ms(4097, 5120, 128).size(), 16u);
  EXPECT_THROW(gemm_sweep_ms(0, 5, 1), Error);
  EXPECT_THROW(gemm_sweep_ms(6, 5, 1), Error);
  EXPECT_THROW(gemm_sweep_ms(1, 5, 0), Error);
}

}  // namespace
}  // namespace detllm::kernels
