// The decode-graph warm-up on the GPU (model/decode_warmup.h, Engine::warm_up_decode_graphs):
// it captures a CUDA graph for every decode shape the engine can use, the run after it
// captures none and replays from its first decode step, and its logits equal an eager run's
// (graphs off) bit for bit, on the invariant and the fast numerics. The CPU twin, with its
// negative control: tests/conformance/decode_warmup_test.cpp. Skips without a GPU.
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaDecodeWarmup*'
#include <gtest/gtest.h>

#include <cstdio>

#include "conformance/decode_warmup_checks.h"
#include "cuda/cuda_test_util.h"

namespace detllm {
namespace {

using testing::run_engine;
using testing::same_bits;

TEST(CudaDecodeWarmup, CapturesEveryShapeAndChangesNoBit) {
  DETLLM_SKIP_WITHOUT_GPU();
  for (bool fast : {false, true}) {
    auto eager_ops = fast ? kernels::cuda_testing::fast_ops() : kernels::cuda_testing::invariant_ops();
    const testing::WarmupRun eager = run_engine(*eager_ops, GraphMode::kOff, false);
    auto ops = fast ? kernels::cuda_testing::fast_ops() : kernels::cuda_testing::invariant_ops();
    const testing::WarmupRun warm = run_engine(*ops, GraphMode::kAuto, true);
    EXPECT_EQ(warm.warmup.steps, 4 * 5) << (fast ? "fast" : "invariant");
    EXPECT_EQ(warm.warmup.captures, 4 * 5);
    EXPECT_GT(warm.replays_in_run, 0);
    std::printf("[warmup] %s: %d steps, %d captures; in the run %lld captures, %lld replays\n",
                fast ? "fast" : "invariant", warm.warmup.steps, warm.warmup.captures,
                static_cast<long long>(warm.captures_in_run),
                static_cast<long long>(warm.replays_in_run));
    if (!fast) {
      // The warm-up prepared the GEMMs (and with them the GEMM scratch) for the engine's step
      // budget, so the run's prefills move no scratch and retire no graph.
      EXPECT_EQ(warm.captures_in_run, 0) << "a decode graph was captured again in the run";
      // The fast numerics (default cuBLAS) promise no bits across shapes; invariant does.
      EXPECT_TRUE(same_bits(warm.logits, eager.logits)) << "the warm-up changed a logit bit";
    }
  }
}

}  // namespace
}  // namespace detllm
