// Programmatic dependent launch (kernels/cuda/pdl.cuh, CudaOptions::programmatic_launch): the
// decode step's small kernels may be scheduled while the kernel before them finishes, and each
// waits for it before touching memory. A missing wait is a race, so the claim is the same bits
// with the launch on and off — eager and replayed from CUDA graphs — on tiny models (short
// kernels, the most overlap), one with q/k norms, and one Llama-3.1-8B-shaped layer at
// contexts past one attention split (several CTA waves, the merge kernel). Its speed:
// benchmarks/cuda_e2e_bench --pdl -1|0|1 (docs/cuda.md).
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaLaunch*'.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "cuda/launch_options_util.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

TEST(CudaLaunch, ProgrammaticLaunchKeepsEveryBit) {
  DETLLM_SKIP_WITHOUT_GPU();
  for (const char* name : {"tiny-llama", "tiny-qwen3", "llama-3.1-8b"}) {
    ModelConfig cfg = synthetic_config(name);
    const bool big = cfg.dim >= 4096;
    if (big) {  // one layer, a small vocabulary
      cfg.n_layers = 1;
      cfg.vocab_size = 2048;
    }
    const ModelWeights w = make_synthetic_weights(cfg, 7);
    // 0 off, 1 on for every small kernel, -1 the default (on for steps of few rows).
    std::vector<float> runs[3];
    for (const int pdl : {0, 1, -1}) {
      kernels::CudaOptions o;
      o.kv_dtype = kernels::cuda_testing::test_kv_dtype();
      o.programmatic_launch = pdl;
      const std::string what =
          std::string(name) + " with programmatic_launch " + std::to_string(pdl);
      runs[pdl + 1] = kernels::cuda_testing::decode_logits(cfg, w, o, what, big ? 10 : 1);
      if (HasFailure()) return;
    }
    ASSERT_FALSE(runs[1].empty()) << name;
    for (const int on : {0, 2}) {
      ASSERT_EQ(runs[on].size(), runs[1].size()) << name;
      EXPECT_EQ(std::memcmp(runs[on].data(), runs[1].data(), runs[1].size() * sizeof(float)), 0)
          << name << ": programmatic_launch " << on - 1 << " changed the logits";
    }
  }
}

}  // namespace
}  // namespace detllm
