// The guarantee matrix library (determinism/guarantee_matrix.h) on the CPU: with the CPU
// kernels every mode holds every variation it can express (V1–V11; V3 and V5 are n/a under
// padded, which never chunks a prefill and runs without the prefix cache) — `verified` on a
// backend whose fast GEMM numerics really differ (PerturbedFastOps), so its candidates are
// rejected and rolled back, and it still holds everything; a batch-dependent backend
// (negative control) must produce FAILS in the table.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "conformance/delegating_ops.h"
#include "determinism/guarantee_matrix.h"
#include "model/synthetic.h"
#include "perturbed_fast_ops.h"

namespace detllm::conformance {
namespace {

// CPU ops whose matmul nudges every output by one ulp when the call has more than one row —
// like a GEMM that switches to split-K at larger M (as in negative_control_test.cpp).
class BatchDependentOps final : public DelegatingOps {
 public:
  explicit BatchDependentOps(int n_threads) : DelegatingOps(n_threads, "batch-dependent") {}
  void matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
              float* y) override {
    inner_->matmul(x, m, w, bias, y);
    if (m > 1) nudge(y, int64_t{m} * w.rows);
  }
};

class GuaranteeMatrixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = synthetic_config("tiny-llama");
    weights_ = make_synthetic_weights(config_, 42);
  }
  VariationSpec spec() const {
    VariationSpec s;
    s.vocab_size = config_.vocab_size;
    s.n_requests = 4;
    s.max_prompt = 20;
    s.max_new_tokens = 6;
    s.cpu_threads = true;
    return s;
  }
  TargetForMode targets(bool batch_dependent) {
    return [this, batch_dependent](DeterminismMode mode) {
      Target t;
      t.name = "tiny-llama";
      t.config = &config_;
      t.weights = &weights_;
      if (batch_dependent) {
        t.make_ops = [](int n) { return std::make_unique<BatchDependentOps>(n); };
      } else if (mode == DeterminismMode::kVerified) {
        t.make_ops = [](int n) { return std::make_unique<PerturbedFastOps>(n, 2e-3f); };
      } else {
        t.make_ops = [](int n) { return kernels::make_cpu_ops(n); };
      }
      return t;
    };
  }
  ModelConfig config_;
  ModelWeights weights_;
};

TEST_F(GuaranteeMatrixTest, VariationsAreData) {
  const auto vs = build_variations(spec());
  ASSERT_EQ(vs.size(), 11u);
  for (size_t i = 0; i < vs.size(); ++i) {
    EXPECT_EQ(vs[i].id, fmt::format("V{}", i + 1));
    EXPECT_FALSE(vs[i].cases.empty()) << vs[i].id;
  }
  VariationSpec gpu = spec();
  gpu.cpu_threads = false;
  EXPECT_EQ(build_variations(gpu).size(), 10u);
}

TEST_F(GuaranteeMatrixTest, CpuModesHoldEverything) {
  const std::vector<DeterminismMode> modes = {DeterminismMode::kInvariant,
                                              DeterminismMode::kBiNaive, DeterminismMode::kPadded,
                                              DeterminismMode::kVerified};
  const GuaranteeMatrix m = run_matrix(targets(false), modes, build_variations(spec()));
  std::printf("%s", m.markdown().c_str());
  for (size_t i = 0; i < m.variations.size(); ++i) {
    for (size_t j = 0; j < modes.size(); ++j) {
      const CellResult& c = m.cells[i][j];
      const std::string where =
          fmt::format("{} × {}: {}", m.variations[i].id, determinism_mode_name(modes[j]), c.text());
      if (modes[j] == DeterminismMode::kPadded &&
          (m.variations[i].id == "V3" || m.variations[i].id == "V5")) {
        // padded never chunks a prefill and runs without the prefix cache (CoRun).
        EXPECT_EQ(c.state, CellResult::State::kNotApplicable) << where;
      } else {
        EXPECT_EQ(c.state, CellResult::State::kHolds) << where;
        EXPECT_EQ(c.n_cases_run, static_cast<int32_t>(m.variations[i].cases.size())) << where;
      }
    }
  }
}

TEST_F(GuaranteeMatrixTest, BatchDependentBackendFails) {
  const GuaranteeMatrix m =
      run_matrix(targets(true), {DeterminismMode::kInvariant}, build_variations(spec()));
  const std::string md = m.markdown();
  std::printf("%s", md.c_str());
  EXPECT_NE(md.find("**FAILS**"), std::string::npos);
  EXPECT_EQ(m.variations[0].id, "V1");
  EXPECT_EQ(m.cells[0][0].state, CellResult::State::kFails) << m.cells[0][0].text();
  EXPECT_NE(m.cells[0][0].text().find("differ"), std::string::npos) << m.cells[0][0].text();
  // V11 (thread counts) and V9 (fresh engine) do not involve the batch: they still hold.
  EXPECT_EQ(m.cells[8][0].state, CellResult::State::kHolds) << m.cells[8][0].text();
}

}  // namespace
}  // namespace detllm::conformance
