// The invariant GEMM's M buckets (kernels/gemm_buckets.h), CPU only: the sequence itself, that
// every m has exactly one bucket and lies in (below, bucket], that no bucket is more than 1.25×
// the one below from 128 on, and that bad input is refused.
// Run: build/tests/test_kernels --gtest_filter='GemmBuckets*'
#include "kernels/gemm_buckets.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace detllm::kernels
