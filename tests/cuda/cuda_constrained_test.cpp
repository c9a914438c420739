// Constrained requests (grammars, docs/structured_output.md) on the CUDA backend: the CPU
// suite's constrained workload (tests/structured/constrained_workload.h) on the tiny synthetic
// models with CUDA ops, under the execution variations of execution_variations.h (V1, V2, V3,
// V6, V7, V8 graphs off, host sampling) — bit for bit. Every draw is sampled on the device,
// the constrained ones masked there (Ops::sample_rows_masked), and host sampling (the host
// sampler over downloaded rows, sample_allowed) gives the same bits. Skips without a GPU or
// without the grammar engine in the build.
// Run: build-cuda/tests/test_cuda --gtest_filter='*CudaConstrained*'.
#include <gtest/gtest.h>

#if DETLLM_HAVE_GRAMMAR

#include <algorithm>

#include "conformance/execution_variations.h"
#include "cuda/cuda_test_util.h"
#include "model/synthetic.h"
#include "structured/constrained_workload.h"
#include "verify/conformance.h"

namespace detllm::conformance {
namespace {

class CudaConstrained : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    DETLLM_SKIP_WITHOUT_GPU();
    config_ = synthetic_config(GetParam());
    if (config_.vocab_size != 512) GTEST_SKIP() << "the tiny grammar vocabulary has 512 ids";
    weights_ = make_synthetic_weights(config_, 42);
    target_.name = GetParam();
    target_.config = &config_;
    target_.weights = &weights_;
    target_.make_ops = [](int) { return kernels::cuda_testing::invariant_ops(); };
    reqs_ = constrained_requests(config_.vocab_size);
  }
  ModelConfig config_;
  ModelWeights weights_;
  Target target_;
  std::vector<engine::Request> reqs_;
};

TEST_P(CudaConstrained, SameBitsUnderEveryExecutionVariation) {
  const RunResult ref = run(target_, base_execution("batch"), reqs_);
  EXPECT_GE(ref.engine_stats.n_rows_sampled_on_backend, ref.engine_stats.n_generated_tokens)
      << "a draw was not sampled on the GPU";
  expect_same_under_variations(target_, reqs_, ref, {.cpu_threads = false, .graphs_off = true});
}

// The grammar changes what is generated on the GPU too (the mask reaches the sampling row).
TEST_P(CudaConstrained, TheGrammarsChangeTheTokens) {
  const RunResult got = run(target_, base_execution("constrained"), reqs_);
  std::vector<engine::Request> plain = reqs_;
  for (auto& r : plain) r.constraint.reset();
  const RunResult free = run(target_, base_execution("unconstrained"), plain);
  int changed = 0;
  for (size_t i = 0; i < reqs_.size(); ++i) {
    changed += reqs_[i].constraint && got.traces[i].tokens != free.traces[i].tokens;
  }
  EXPECT_GE(changed, 4);
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaConstrained, ::testing::Values("tiny-llama", "tiny-qwen3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace detllm::conformance

#endif  // DETLLM_HAVE_GRAMMAR
