// Constrained requests (grammars, docs/structured_output.md) on the CUDA backend: the CPU
// suite's constrained workload (tests/structured/constrained_workload.h) on the tiny synthetic
// models with CUDA ops, under batch vs each request alone (V1), staggered arrival (V2), chunked
// prefill (V3), preemption and recompute (V6), CUDA graphs off (V8) and host sampling — bit
// for bit. Constrained draws are sampled on the host from downloaded rows, the others on the
// device in the same step. Skips without a GPU or without the grammar engine in the build.
// Run: build-cuda/tests/test_cuda --gtest_filter='*CudaConstrained*'.
#include <gtest/gtest.h>

#if DETLLM_HAVE_GRAMMAR

#include <algorithm>

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
    WorkloadSpec s;
    s.n_requests = 10;
    s.vocab_size = config_.vocab_size;
    s.max_prompt = 30;
    s.max_new_tokens = 30;
    s.scoring_share = 0.1;
    reqs_ = random_workload(9, s);
    add_constraints(reqs_);
  }
  void expect_same(const RunResult& ref, const RunResult& got, const std::string& what) {
    const auto m = first_mismatch(reqs_, ref.traces, got.traces);
    EXPECT_FALSE(m.has_value()) << what << ": " << m->what;
  }
  ModelConfig config_;
  ModelWeights weights_;
  Target target_;
  std::vector<engine::Request> reqs_;
};

TEST_P(CudaConstrained, SameBitsUnderEveryExecutionVariation) {
  const RunResult ref = run(target_, base_execution("batch"), reqs_);
  EXPECT_GT(ref.n_shared_steps, 0);
  EXPECT_GT(ref.engine_stats.n_rows_sampled_on_backend, 0) << "no draw was sampled on the GPU";
  for (size_t i = 0; i < reqs_.size(); ++i) {
    const RunResult alone = run(target_, base_execution("alone"), {reqs_[i]});
    const auto m = compare(ref.traces[i], alone.traces[0]);
    EXPECT_FALSE(m.has_value()) << "request " << i << " alone: " << m->what;
  }
  Execution staggered = base_execution("staggered");
  for (size_t i = 0; i < reqs_.size(); ++i)
    staggered.arrival.push_back(static_cast<int32_t>(3 * i));
  expect_same(ref, run(target_, staggered, reqs_), "V2 staggered arrival");
  Execution chunked = base_execution("chunked");
  chunked.engine.scheduler.chunk_size = 7;
  expect_same(ref, run(target_, chunked, reqs_), "V3 chunks of 7");
  Execution small = base_execution("preempting");
  small.engine.scheduler.kv.n_blocks = 20;
  const RunResult preempted = run(target_, small, reqs_);
  EXPECT_GT(preempted.n_preemptions, 0) << "the small pool never preempted";
  expect_same(ref, preempted, "V6 preemption + recompute");
  Execution eager = base_execution("no graphs");
  eager.engine.cuda_graphs = GraphMode::kOff;
  expect_same(ref, run(target_, eager, reqs_), "V8 graphs off");
  Execution host = base_execution("host sampling");
  host.engine.host_sampling = true;
  expect_same(ref, run(target_, host, reqs_), "host sampling");
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
