// The hardware fact the transposed decode warp stands on (mma_swap_check.h beside this file,
// compiled into test_cuda only, not the library): an m16n8k16 bf16 product with A and B exchanged is the transposed result bit for bit, for a
// chain of k-steps, with C = 0 (scores) and with a nonzero C (O accumulated); the control, the
// same exchange with the k-steps descending, differs — so the comparison can fail.
// Run: test_cuda --gtest_filter='CudaMmaSwap*' (skips without a GPU).
#include <gtest/gtest.h>

#include <cstdio>

#include "cuda/cuda_test_util.h"
#include "cuda/mma_swap_check.h"

namespace detllm::kernels {
namespace {

TEST(CudaMmaSwap, ExchangedOperandsGiveTheTransposedProductBitForBit) {
  DETLLM_SKIP_WITHOUT_GPU();
  cuda::MmaSwapCounts c;
  ASSERT_EQ(cuda::mma_swap_check(uint64_t{1} << 18, 20261203, &c), cudaSuccess);
  std::printf(
      "  [mma swap] %llu elements each: %llu differ (C = 0), %llu differ (C != 0), "
      "control (k-steps descending) %llu differ\n",
      static_cast<unsigned long long>(c.elements), static_cast<unsigned long long>(c.zero_c),
      static_cast<unsigned long long>(c.nonzero_c), static_cast<unsigned long long>(c.control));
  EXPECT_EQ(c.elements, (uint64_t{1} << 18) * 128);
  EXPECT_EQ(c.zero_c, 0u);
  EXPECT_EQ(c.nonzero_c, 0u);
  EXPECT_GT(c.control, 0u) << "the control matched: the comparison cannot fail";
}

}  // namespace
}  // namespace detllm::kernels
