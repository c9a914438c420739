// The reduction-order analyzer tied to the CUDA kernels' bits (src/verify/reduction_order,
// docs/contract.md "What is proved"): steps the analyzer calls equal for a row — the same
// order of its reduction — give that row the same bits on the GPU; and the one context pair it
// calls different here (a GEMM with two K splits) gives other bits. tests/reduction_order does
// the same on the CPU kernels in CI.
// Run: test_cuda --gtest_filter='CudaReductionOrder*' (skips without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "verify/reduction_order/describe.h"

namespace detllm::kernels {
namespace {

using namespace cuda_testing;
namespace ro = reduction_order;

// The analyzer's view of a PagedWorld step whose chunks are listed in sequence order.
ro::AttentionStep analyzer_step(const AttnShape& shape, const std::vector<int>& lengths,
                                const std::vector<Chunk>& chunks, int kernel) {
  ro::AttentionStep st;
  st.n_heads = shape.n_heads;
  st.n_kv_heads = shape.n_kv_heads;
  st.head_dim = shape.head_dim;
  st.block_size = shape.block_size;
  st.seqs.assign(lengths.size(), ro::AttentionStep::Seq{0, 0});
  for (const Chunk& c : chunks) st.seqs[static_cast<size_t>(c.seq)] = {c.start, c.count};
  int longest = 0, world = 0;
  for (const auto& s : st.seqs) longest = std::max(longest, s.first + s.n_query);
  for (int len : lengths) world = std::max(world, len);
  const int bs = shape.block_size;
  st.extra_blocks = (world + bs - 1) / bs - (longest + bs - 1) / bs;
  st.force.kernel = kernel;
  return st;
}

TEST(CudaReductionOrder, AttentionRowsTheAnalyzerCallsEqualHaveEqualBits) {
  DETLLM_SKIP_WITHOUT_GPU();
  const AttnShape shape{8, 2, 128, 16};
  const int len = 700;
  const ro::Schedules real = ro::real_schedules();
  for (int kernel : {-1, static_cast<int>(AttentionKernel::kDecodeWarps),
                     static_cast<int>(AttentionKernel::kWarpgroup),
                     static_cast<int>(AttentionKernel::kPacked)}) {
    SCOPED_TRACE(::testing::Message() << "forced kernel " << kernel);
    CudaOptions o;
    o.kv_dtype = DType::kBF16;
    o.attention_kernel = kernel;
    auto ops = make_cuda_ops(o);
    // Reference: the whole prompt in one step.
    DevicePagedWorld base(*ops, shape, {42}, {len}, 0);
    const std::vector<Chunk> whole = {{0, 0, len}};
    base.step(whole);
    const ro::AttentionStep whole_step = analyzer_step(shape, {len}, whole, kernel);
    // Chunks of 1 (decode), 37 and 300, beside a second sequence's decode rows, shuffled pages.
    for (int chunk : {1, 37, 300}) {
      SCOPED_TRACE(::testing::Message() << "chunks of " << chunk);
      const std::vector<int> lengths = {len, 400};
      DevicePagedWorld w(*ops, shape, {42, 7}, lengths, 5 + chunk);
      int other = 0;
      int equal_rows = 0;
      for (int start = 0; start < len; start += chunk) {
        std::vector<Chunk> step = {{0, start, std::min(chunk, len - start)}};
        if (other < 400) step.push_back({1, other++, 1});
        w.step(step);
        const ro::AttentionStep st = analyzer_step(shape, lengths, step, kernel);
        for (int j = 0; j < step[0].count; ++j) {
          const int p = start + j;
          // The analyzer calls the row's two contexts equal; the bits must be.
          ASSERT_EQ(ro::describe_attention_tc(real, whole_step, 0, p),
                    ro::describe_attention_tc(real, st, 0, j))
              << "position " << p;
          ++equal_rows;
          const int64_t d = first_bit_difference(base.output(0, p).data(), w.output(0, p).data(),
                                                 base.row_floats());
          ASSERT_EQ(d, -1) << "position " << p << ": the analyzer's equal orders, other bits";
        }
      }
      EXPECT_EQ(equal_rows, len);
    }
  }
}

TEST(CudaReductionOrder, GemmRowsEqualWhereTheAnalyzerSaysSoAndDifferWhereNot) {
  DETLLM_SKIP_WITHOUT_GPU();
  const ro::Schedules real = ro::real_schedules();
  const int64_t n = 1536, k = 2048;
  auto ops = invariant_ops();
  CudaOptions split;
  split.gemm_splits_override = 2;
  auto split_ops = make_cuda_ops(split);
  const int m = 300;
  DeviceArray<float> x(*ops, fast_random_floats(size_t(m) * k, 31));
  DeviceArray<uint16_t> w(*ops, to_bf16(fast_random_floats(size_t(n) * k, 32, -0.05f, 0.05f)));
  DeviceArray<float> y(*ops, size_t(m) * n), y1(*ops, size_t(n));
  const WeightMatrix wm{w.data(), DType::kBF16, n, k};
  ops->matmul(x.data(), m, wm, nullptr, y.data());
  const std::vector<float> batch = y.download();
  for (int row : {0, 17, 299}) {
    ASSERT_EQ(ro::describe_gemm_cuda(real, 1, n, k, false),
              ro::describe_gemm_cuda(real, m, n, k, true));
    ops->matmul(x.data() + size_t(row) * k, 1, wm, nullptr, y1.data());
    const std::vector<float> alone = y1.download();
    EXPECT_EQ(first_bit_difference(alone.data(), batch.data() + size_t(row) * n, n), -1)
        << "row " << row;
  }
  // Two K splits: the analyzer says the order differs, and the bits do.
  ASSERT_NE(ro::describe_gemm_cuda(real, m, n, k, false, 0),
            ro::describe_gemm_cuda(real, m, n, k, false, 2));
  split_ops->matmul(x.data(), m, wm, nullptr, y.data());
  split_ops->synchronize();
  const std::vector<float> two = y.download();
  EXPECT_NE(first_bit_difference(two.data(), batch.data(), int64_t(m) * n), -1)
      << "two K splits gave the one-split bits: the negative direction shows nothing";
}

}  // namespace
}  // namespace detllm::kernels
