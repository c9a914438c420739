// Negative controls: the conformance harness must FAIL on a backend that is not invariant.
// A decorator backend perturbs results in a way real non-invariant kernels do (the result of
// a row depends on how many rows share the call, or on the thread count); the same checks
// that pass on the CPU backend must catch each one. A suite that cannot fail proves nothing.
#include <gtest/gtest.h>

#include <cmath>

#include "conformance/delegating_ops.h"
#include "determinism/conformance.h"
#include "model/synthetic.h"

namespace detllm::conformance {
namespace {

// Forwards to the CPU backend; matmul nudges every output by one ulp when the call has more
// than `m_threshold` rows — like a GEMM that switches to split-K at larger M.
class BatchDependentOps final : public DelegatingOps {
 public:
  BatchDependentOps(int n_threads, int m_threshold)
      : DelegatingOps(n_threads, "batch-dependent"), m_threshold_(m_threshold) {}
  void matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
              float* y) override {
    inner_->matmul(x, m, w, bias, y);
    if (m > m_threshold_) nudge(y, int64_t{m} * w.rows);
  }

 private:
  int m_threshold_;
};

class NegativeControl : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = synthetic_config("tiny-llama");
    weights_ = make_synthetic_weights(config_, 42);
    target_.name = "batch-dependent";
    target_.config = &config_;
    target_.weights = &weights_;
    target_.make_ops = [](int n) { return std::make_unique<BatchDependentOps>(n, 1); };
  }
  Execution exec(const std::string& label) {
    Execution e;
    e.label = label;
    e.engine.scheduler.kv.block_size = 4;
    e.engine.kv_cache_tokens = 2048;
    return e;
  }
  ModelConfig config_;
  ModelWeights weights_;
  Target target_;
};

TEST_F(NegativeControl, BatchCompositionIsCaught) {
  WorkloadSpec s;
  s.n_requests = 4;
  s.vocab_size = config_.vocab_size;
  s.scoring_share = 0;
  s.min_prompt = 2;
  auto reqs = random_workload(1, s);
  for (auto& r : reqs) r.max_tokens = 4;
  // Alone, decode steps have one row (unperturbed); batched, every step has several.
  const RunResult alone = run(target_, exec("alone"), {reqs[0]});
  const RunResult batched = run(target_, exec("batched"), reqs);
  const auto m = compare(alone.traces[0], batched.traces[0]);
  ASSERT_TRUE(m.has_value()) << "the harness missed a batch-dependent kernel";
  std::printf("caught: %s\n", m->what.c_str());
}

TEST_F(NegativeControl, ChunkingIsCaught) {
  engine::Request r;
  for (int i = 0; i < 20; ++i) r.prompt.push_back(i * 7 % config_.vocab_size);
  r.max_tokens = 3;
  r.sampling.temperature = 0;
  Execution whole = exec("whole");
  Execution chunked = exec("chunk 1");
  chunked.engine.scheduler.chunk_size = 1;  // prompt one token per step: m == 1 throughout
  const auto m = compare(run(target_, whole, {r}).traces[0], run(target_, chunked, {r}).traces[0]);
  EXPECT_TRUE(m.has_value()) << "the harness missed a chunk-dependent kernel";
}

}  // namespace
}  // namespace detllm::conformance
