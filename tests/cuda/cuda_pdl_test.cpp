// Programmatic dependent launch (kernels/cuda/pdl.cuh, CudaOptions::programmatic_launch): the
// decode step's small kernels may be scheduled while the kernel before them finishes, and each
// waits for it before touching memory. A missing wait is a race, so the claim is the same bits
// with the launch on and off — eager and replayed from CUDA graphs — on tiny models (short
// kernels, the most overlap), one with q/k norms, and one Llama-3.1-8B-shaped layer at
// contexts past one attention split (several CTA waves, the merge kernel). Its speed:
// benchmarks/cuda_e2e_bench --pdl -1|0|1 (docs/cuda.md). The same on per-channel FP8
// projections, where the split FP8 GEMM's first weight tiles are read before its wait.
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaLaunch*'.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "cuda/launch_options_util.h"
#include "model/fp8_weights.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

void expect_same_bits_with_and_without_pdl(bool fp8) {
  for (const char* name : {"tiny-llama", "tiny-qwen3", "llama-3.1-8b"}) {
    ModelConfig cfg = synthetic_config(name);
    const bool big = cfg.dim >= 4096;
    if (big) {  // one layer, a small vocabulary
      cfg.n_layers = 1;
      cfg.vocab_size = 2048;
    }
    ModelWeights w = make_synthetic_weights(cfg, 7);
    if (fp8) quantize_weights_fp8(w, cfg);
    // 0 off, 1 on for every small kernel, -1 the default (on for steps of few rows).
    std::vector<float> runs[3];
    for (const int pdl : {0, 1, -1}) {
      kernels::CudaOptions o;
      o.kv_dtype = kernels::cuda_testing::test_kv_dtype();
      o.programmatic_launch = pdl;
      const std::string what = std::string(name) + (fp8 ? "@fp8" : "") +
                               " with programmatic_launch " + std::to_string(pdl);
      runs[pdl + 1] = kernels::cuda_testing::decode_logits(cfg, w, o, what, big ? 10 : 1);
      if (::testing::Test::HasFailure()) return;
    }
    ASSERT_FALSE(runs[1].empty()) << name;
    for (const int on : {0, 2}) {
      ASSERT_EQ(runs[on].size(), runs[1].size()) << name;
      EXPECT_EQ(std::memcmp(runs[on].data(), runs[1].data(), runs[1].size() * sizeof(float)), 0)
          << name << (fp8 ? "@fp8" : "") << ": programmatic_launch " << on - 1
          << " changed the logits";
    }
  }
}

TEST(CudaLaunch, ProgrammaticLaunchKeepsEveryBit) {
  DETLLM_SKIP_WITHOUT_GPU();
  expect_same_bits_with_and_without_pdl(false);
}

TEST(CudaLaunch, ProgrammaticLaunchKeepsEveryFp8Bit) {
  DETLLM_SKIP_WITHOUT_GPU();
  expect_same_bits_with_and_without_pdl(true);
}

}  // namespace
}  // namespace detllm
