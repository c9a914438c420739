// The weight prefetch (kernels/cuda/weight_prefetch.h): its plan covers every row within the
// budget (host code, runs in CI); the prefetch kernel writes nothing; and a model gives the same
// bits with the prefetch off, whole and as row prefixes — eager and replayed from CUDA graphs
// (the side stream's branch joins every capture). A prefetch is a hint, so "the same bits" is
// the whole claim; its speed is measured by benchmarks/cuda_e2e_bench --prefetch (docs/perf.md).
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaWeightPrefetch*'.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "cuda/launch_options_util.h"
#include "kernels/cuda/weight_prefetch.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

using kernels::cuda::plan_weight_prefetch;
using kernels::cuda::PrefetchPlan;

TEST(CudaWeightPrefetch, PlanCoversEveryRow) {
  // Fits: the whole matrix, as one range.
  PrefetchPlan p = plan_weight_prefetch(4096, 8192, int64_t{32} << 20);
  EXPECT_EQ(p.rows, 4096);
  EXPECT_EQ(p.prefix, 8192);
  EXPECT_EQ(p.bytes(), int64_t{32} << 20);
  // Does not fit: the same prefix of every row, a multiple of 16, the largest within budget.
  for (const int64_t rows : {6144, 28672, 4096, 3}) {
    for (const int64_t pitch : {int64_t{8192}, int64_t{28672}, int64_t{48}}) {
      for (const int64_t budget : {int64_t{30} << 20, int64_t{1} << 20, int64_t{4096}}) {
        p = plan_weight_prefetch(rows, pitch, budget);
        const std::string what = std::to_string(rows) + " x " + std::to_string(pitch) + " budget " +
                                 std::to_string(budget);
        if (rows * pitch <= budget) {
          EXPECT_EQ(p.prefix, pitch) << what;
          continue;
        }
        EXPECT_EQ(p.prefix % 16, 0) << what;
        EXPECT_LE(p.prefix, pitch) << what;
        EXPECT_LE(p.bytes(), budget) << what;
        EXPECT_GT((p.prefix + 16) * rows, budget) << what << ": a larger prefix fits";
        EXPECT_EQ(p.rows, p.prefix == 0 ? 0 : rows) << what;
      }
    }
  }
  // Nothing to do.
  EXPECT_EQ(plan_weight_prefetch(0, 8192, 1 << 20).bytes(), 0);
  EXPECT_EQ(plan_weight_prefetch(100, 8, 1 << 20).bytes(), 0);  // rows below the 16-byte unit
  EXPECT_EQ(plan_weight_prefetch(100, 8192, 0).bytes(), 0);
  EXPECT_EQ(plan_weight_prefetch(1 << 20, 8192, 1 << 20).bytes(), 0);  // < 16 bytes a row
}

// Prefetches of a whole matrix (last 64 KB range partial) and of row prefixes leave every
// byte as it was, and report no error.
TEST(CudaWeightPrefetch, WritesNothing) {
  DETLLM_SKIP_WITHOUT_GPU();
  const int64_t rows = 1000, pitch = 4112;  // 4,112,000 bytes: not a multiple of 64 KB
  std::vector<uint8_t> host(rows * pitch);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  void* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, host.size()), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, stream),
            cudaSuccess);
  {
    kernels::cuda::WeightPrefetcher prefetcher;
    for (const int64_t budget : {rows * pitch, int64_t{100000}, int64_t{16000}}) {
      const PrefetchPlan plan = plan_weight_prefetch(rows, pitch, budget);
      ASSERT_GT(plan.bytes(), 0);
      ASSERT_EQ(prefetcher.issue(stream, dev, pitch, plan), cudaSuccess);
    }
    ASSERT_EQ(prefetcher.join(stream), cudaSuccess);
  }
  std::vector<uint8_t> back(host.size());
  ASSERT_EQ(cudaMemcpyAsync(back.data(), dev, back.size(), cudaMemcpyDeviceToHost, stream),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(std::memcmp(back.data(), host.data(), host.size()), 0);
  cudaStreamDestroy(stream);
  cudaFree(dev);
}

// The same decode steps (prompts, then steps of 1–8 rows, eager and from graphs) with the
// prefetch off, whole matrices, and row prefixes of a few hundred bytes: the same logits.
TEST(CudaWeightPrefetch, SameBitsOffWholeAndPrefixesEagerAndInGraphs) {
  DETLLM_SKIP_WITHOUT_GPU();
  for (const char* name : {"tiny-llama", "tiny-qwen2"}) {
    const ModelConfig cfg = synthetic_config(name);
    const ModelWeights w = make_synthetic_weights(cfg, 5);
    std::vector<std::vector<float>> runs;
    for (const int64_t bytes : {int64_t{0}, int64_t{1} << 30, int64_t{4096}}) {
      kernels::CudaOptions o;
      o.kv_dtype = kernels::cuda_testing::test_kv_dtype();
      o.weight_prefetch.bytes = bytes;
      const std::string what = std::string(name) + " prefetch " + std::to_string(bytes);
      runs.push_back(kernels::cuda_testing::decode_logits(cfg, w, o, what));
      if (HasFailure()) return;
    }
    for (size_t r = 1; r < runs.size(); ++r) {
      ASSERT_EQ(runs[r].size(), runs[0].size());
      ASSERT_FALSE(runs[0].empty());
      EXPECT_EQ(std::memcmp(runs[r].data(), runs[0].data(), runs[0].size() * sizeof(float)), 0)
          << name << ": prefetch setting " << r << " changed the logits";
    }
  }
}

}  // namespace
}  // namespace detllm
