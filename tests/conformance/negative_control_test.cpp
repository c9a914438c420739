// Negative controls: the conformance checks must FAIL on a backend that is not invariant.
// Each fault of fault_ops.h (one ulp where a real non-invariant kernel or cache would differ)
// is run through the guarantee matrix's case for the variation it breaks — the same cases and
// exercised-checks as the matrix — and that cell must read FAILS. A suite that cannot fail
// proves nothing. The whole suite against each fault: DETLLM_CONFORMANCE_FAULT=<fault>
// build/tests/test_conformance (conformance_test.cpp); README lists what each fails.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "conformance/fault_ops.h"
#include "conformance/speculation_checks.h"
#include "model/fp8_weights.h"
#include "model/synthetic.h"
#include "verify/conformance.h"
#include "verify/guarantee_matrix.h"

namespace detllm::conformance {
namespace {

class NegativeControl : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = synthetic_config(model_);
    weights_ = make_synthetic_weights(config_, 42);
  }
  Target target(const std::string& fault) const {
    Target t;
    t.name = "fault:" + fault;
    t.config = &config_;
    t.weights = &weights_;
    t.make_ops = [fault](int n) { return make_fault_ops(fault, n); };
    return t;
  }
  Execution exec(const std::string& label) {
    Execution e;
    e.label = label;
    e.engine.scheduler.kv.block_size = 4;
    e.engine.kv_cache_tokens = 2048;
    return e;
  }
  // The matrix's variations at the guarantee matrix test's size (cheap: tiny model, 4 requests).
  std::vector<Variation> variations() const {
    VariationSpec s;
    s.vocab_size = config_.vocab_size;
    s.n_requests = 4;
    s.max_prompt = 20;
    s.max_new_tokens = 6;
    s.cpu_threads = true;
    return build_variations(s);
  }
  CellResult run_cell(const std::string& fault, const std::string& id) const {
    for (const Variation& v : variations()) {
      if (v.id == id) return run_variation(target(fault), DeterminismMode::kInvariant, v);
    }
    ADD_FAILURE() << "no variation " << id;
    return {};
  }
  std::string model_ = "tiny-llama";  // the synthetic model the controls run on
  ModelConfig config_;
  ModelWeights weights_;
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
  const Target t = target("batch-matmul");
  const RunResult alone = run(t, exec("alone"), {reqs[0]});
  const RunResult batched = run(t, exec("batched"), reqs);
  const auto m = compare(alone.traces[0], batched.traces[0]);
  ASSERT_TRUE(m.has_value()) << "the harness missed a batch-dependent kernel";
  std::printf("caught: %s\n", m->what.c_str());
}

TEST_F(NegativeControl, ChunkingIsCaught) {
  engine::Request r;
  for (int i = 0; i < 20; ++i) r.prompt.push_back(i * 7 % config_.vocab_size);
  r.max_tokens = 3;
  r.sampling.temperature = 0;
  const Target t = target("batch-matmul");
  Execution whole = exec("whole");
  Execution chunked = exec("chunk 1");
  chunked.engine.scheduler.chunk_size = 1;  // prompt one token per step: m == 1 throughout
  const auto m = compare(run(t, whole, {r}).traces[0], run(t, chunked, {r}).traces[0]);
  EXPECT_TRUE(m.has_value()) << "the harness missed a chunk-dependent kernel";
}

// Speculative decoding is free only because a row's bits do not depend on how many query rows
// its sequence has in the step: attention that does (qlen-attention: a draft window's k + 1
// rows perturbed, a plain decode's one row not) must fail the speculation check.
TEST_F(NegativeControl, QueryLengthDependenceFailsSpeculation) {
  const auto reqs = repetitive_workload(21, config_.vocab_size, 6);
  const SpeculationVerdict v = check_speculation(target("qlen-attention"), reqs);
  ASSERT_TRUE(v.mismatch.has_value()) << "the speculation check missed a query-length fault";
  std::printf("caught: %s\n", v.mismatch->what.c_str());
  // The same check on the exact backend holds (the fault, not the check, makes the difference).
  Target exact = target("qlen-attention");
  exact.make_ops = [](int n) { return kernels::make_cpu_ops(n); };
  EXPECT_FALSE(check_speculation(exact, reqs).mismatch.has_value());
  // The draft-model and adaptive cases on their own catch it too.
  const SpeculationVerdict d =
      check_speculation(target("qlen-attention"), reqs, SpeculationCases::kDrafters);
  ASSERT_TRUE(d.mismatch.has_value()) << "the draft-model cases missed a query-length fault";
  std::printf("caught with a draft model: %s\n", d.mismatch->what.c_str());
}

// Each fault makes the matrix cell of the variation it breaks FAIL (not "not exercised": the
// case's runs did what it claims, and the bits differed).
struct FaultCase {
  const char* fault;
  const char* variation;
};
class FaultFails : public NegativeControl, public ::testing::WithParamInterface<FaultCase> {};

TEST_P(FaultFails, ItsVariation) {
  const FaultCase fc = GetParam();
  const CellResult c = run_cell(fc.fault, fc.variation);
  std::printf("%s × %s: %s\n", fc.fault, fc.variation, c.text().c_str());
  EXPECT_EQ(c.state, CellResult::State::kFails) << c.text();
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, FaultFails,
    ::testing::Values(FaultCase{"batch-matmul", "V1"}, FaultCase{"qlen-attention", "V3"},
                      FaultCase{"qlen-attention", "V4"}, FaultCase{"layout-attention", "V7"},
                      FaultCase{"kv-reuse", "V5"}, FaultCase{"recompute", "V6"},
                      FaultCase{"graph-replay", "V8"}, FaultCase{"threads", "V11"}),
    [](const ::testing::TestParamInfo<FaultCase>& info) {
      std::string n = fmt::format("{}_{}", info.param.fault, info.param.variation);
      for (char& ch : n) ch = ch == '-' ? '_' : ch;
      return n;
    });

// The mixture-of-experts faults, on the tiny MoE model (whose router ties in every step):
// an expert GEMM that depends on its group size fails V1 (neighbours share experts); a tie
// rule by arrival order fails V2 (other rows in the step) and V3 (chunks move the rows).
class MoeFaultFails : public NegativeControl, public ::testing::WithParamInterface<FaultCase> {
 protected:
  MoeFaultFails() { model_ = "tiny-qwen3-moe"; }
};

TEST_P(MoeFaultFails, ItsVariation) {
  const FaultCase fc = GetParam();
  const CellResult c = run_cell(fc.fault, fc.variation);
  std::printf("%s × %s (tiny-qwen3-moe): %s\n", fc.fault, fc.variation, c.text().c_str());
  EXPECT_EQ(c.state, CellResult::State::kFails) << c.text();
}

INSTANTIATE_TEST_SUITE_P(Cpu, MoeFaultFails,
                         ::testing::Values(FaultCase{"moe-group-matmul", "V1"},
                                           FaultCase{"moe-tie-arrival", "V2"},
                                           FaultCase{"moe-tie-arrival", "V3"}),
                         [](const ::testing::TestParamInfo<FaultCase>& info) {
                           std::string n =
                               fmt::format("{}_{}", info.param.fault, info.param.variation);
                           for (char& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

// FP8 weights (model/fp8_weights.h, as --quantization fp8 makes them): one activation scale
// over the whole batch (fp8-batch-scale, the per-tensor dynamic scale refused at load) fails V1;
// the CPU backend's per-token scales hold it on the same model.
class Fp8NegativeControl : public NegativeControl {
 protected:
  void SetUp() override {
    NegativeControl::SetUp();
    quantize_weights_fp8(weights_, config_);
  }
};

TEST_F(Fp8NegativeControl, BatchScaleFailsV1AndPerTokenHoldsIt) {
  const CellResult c = run_cell("fp8-batch-scale", "V1");
  std::printf("fp8-batch-scale × V1 (tiny-llama@fp8): %s\n", c.text().c_str());
  EXPECT_EQ(c.state, CellResult::State::kFails) << c.text();
  for (const Variation& v : variations()) {
    if (v.id != "V1") continue;
    Target exact = target("fp8-batch-scale");
    exact.make_ops = [](int n) { return kernels::make_cpu_ops(n); };
    const CellResult ok = run_variation(exact, DeterminismMode::kInvariant, v);
    EXPECT_EQ(ok.state, CellResult::State::kHolds) << ok.text();
  }
}

// The same control on a mixture of experts with FP8 experts — per-channel rows, and the fp8
// format's 128x128-block rows with activations per token and 128 columns: one scale for the
// whole call fails V1, the CPU backend's row-local scales hold it (routed experts included).
TEST_F(NegativeControl, Fp8BatchScaleFailsV1OnFp8Experts) {
  model_ = "tiny-qwen3-moe";
  for (const Fp8Rows rows : {Fp8Rows::kChannel, Fp8Rows::kBlockG128}) {
    SetUp();
    quantize_weights_fp8(weights_, config_, rows);
    const char* name = rows == Fp8Rows::kChannel ? "fp8" : "fp8g";
    const CellResult c = run_cell("fp8-batch-scale", "V1");
    std::printf("fp8-batch-scale × V1 (tiny-qwen3-moe@%s): %s\n", name, c.text().c_str());
    EXPECT_EQ(c.state, CellResult::State::kFails) << name << ": " << c.text();
    for (const Variation& v : variations()) {
      if (v.id != "V1") continue;
      Target exact = target("fp8-batch-scale");
      exact.make_ops = [](int n) { return kernels::make_cpu_ops(n); };
      const CellResult ok = run_variation(exact, DeterminismMode::kInvariant, v);
      EXPECT_EQ(ok.state, CellResult::State::kHolds) << name << ": " << ok.text();
    }
  }
}

// The FP8 KV cache: scales from the call's own K/V (a live batch) fail V1; the scales fixed at
// load (the CPU backend's --kv-dtype fp8) hold it on the same model.
TEST_F(NegativeControl, Fp8KvLiveScaleFailsV1AndFixedScalesHoldIt) {
  const CellResult c = run_cell("fp8-kv-live-scale", "V1");
  std::printf("fp8-kv-live-scale × V1: %s\n", c.text().c_str());
  EXPECT_EQ(c.state, CellResult::State::kFails) << c.text();
  for (const Variation& v : variations()) {
    if (v.id != "V1") continue;
    Target exact = target("fp8-kv-live-scale");
    exact.make_ops = [](int n) {
      return kernels::make_cpu_ops(n, CpuActivations::kF32, /*kv_fp8=*/true);
    };
    const CellResult ok = run_variation(exact, DeterminismMode::kInvariant, v);
    EXPECT_EQ(ok.state, CellResult::State::kHolds) << ok.text();
  }
}

// Both MoE faults leave a fresh engine running the same schedule alone (V9): what they break
// is the variation, and the tiny MoE model holds V9 under them.
TEST_F(NegativeControl, MoeFaultsLeaveAFreshEngineAlone) {
  model_ = "tiny-qwen3-moe";
  SetUp();
  for (const char* fault : {"moe-group-matmul", "moe-tie-arrival"}) {
    const CellResult c = run_cell(fault, "V9");
    EXPECT_EQ(c.state, CellResult::State::kHolds) << fault << ": " << c.text();
  }
}

// Every fault is a pure function of the schedule (no randomness): V9 (a fresh engine running
// the same schedule) holds under each, so what the controls catch is the variation.
TEST_F(NegativeControl, FaultsLeaveAFreshEngineAlone) {
  for (const std::string& fault : fault_names()) {
    const CellResult c = run_cell(fault, "V9");
    EXPECT_EQ(c.state, CellResult::State::kHolds) << fault << ": " << c.text();
  }
}

// The CPU graph emulation without its fault changes no bit, and its steps really replay: the
// graph-replay control fails because of the planted difference, not because of the emulation.
TEST_F(NegativeControl, ExactCpuGraphsHoldV8AndReplay) {
  const CellResult c = run_cell("graph-replay-exact", "V8");
  EXPECT_EQ(c.state, CellResult::State::kHolds) << c.text();
  WorkloadSpec s;
  s.n_requests = 3;
  s.vocab_size = config_.vocab_size;
  s.scoring_share = 0;
  auto reqs = random_workload(5, s);
  for (auto& r : reqs) r.max_tokens = 6;
  Execution on = exec("graphs on");
  on.engine.cuda_graphs = GraphMode::kOn;
  const RunResult got = run(target("graph-replay-exact"), on, reqs);
  EXPECT_TRUE(got.graphs_available);
  EXPECT_GT(got.n_graph_replays, 0);
}

}  // namespace
}  // namespace detllm::conformance
