// The guarantee matrix library (verify/guarantee_matrix.h) on the CPU: with the CPU
// kernels every mode holds every variation it can express (V1–V11; V3 and V5 are n/a under
// padded, which never chunks a prefill and runs without the prefix cache), each case showing
// from its runs' statistics that its variation happened — `verified` on a backend whose fast
// GEMM numerics really differ (PerturbedFastOps), so its candidates are rejected and rolled
// back, and it still holds everything; a case whose variation did not happen reads "not
// exercised"; a batch-dependent backend (negative control) must produce FAILS in the table.
// The same on the mixture-of-experts tiny-qwen3-moe (router ties in every step), whose traces
// also compare each token's routed experts, and (invariant mode) on that model with every
// matrix Q8_0 written as a GGUF file in llama.cpp's layout and loaded back by load_model.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "conformance/fault_ops.h"
#include "model/fp8_weights.h"
#include "model/gguf_moe_export.h"
#include "model/model_loader.h"
#include "model/synthetic.h"
#include "perturbed_fast_ops.h"
#include "verify/guarantee_matrix.h"

namespace detllm::conformance {
namespace {

class GuaranteeMatrixTest : public ::testing::Test {
 protected:
  void SetUp() override { use_model("tiny-llama"); }
  void check_every_cpu_mode();
  void use_model(const std::string& name) {
    name_ = name;
    config_ = synthetic_config(name);
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
      t.name = name_;
      t.config = &config_;
      t.weights = &weights_;
      if (batch_dependent) {
        t.make_ops = [](int n) { return std::make_unique<BatchDependentMatmulOps>(n); };
      } else if (mode == DeterminismMode::kVerified) {
        t.make_ops = [](int n) { return std::make_unique<PerturbedFastOps>(n, 2e-3f); };
      } else {
        t.make_ops = [](int n) { return kernels::make_cpu_ops(n); };
      }
      return t;
    };
  }
  std::string name_;
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
  // Each case once: with 4 requests, "3 neighbours" (k = 3 and k = n - 1) was listed twice.
  for (const Variation& v : vs) {
    for (size_t i = 0; i < v.cases.size(); ++i) {
      for (size_t j = i + 1; j < v.cases.size(); ++j) {
        EXPECT_NE(v.cases[i].label, v.cases[j].label) << v.id;
      }
    }
  }
}

// A case whose run does not show its variation reads "not exercised", never "holds": V6 with a
// pool large enough that nothing is preempted (what the matrix's V6 case did before it was
// sized from its workload: 0 preemptions, reported as "holds").
TEST_F(GuaranteeMatrixTest, UnexercisedVariationIsNotReportedAsHolding) {
  auto vs = build_variations(spec());
  Variation v6 = vs.at(5);
  ASSERT_EQ(v6.id, "V6");
  ASSERT_EQ(v6.cases.size(), 1u);
  Target t = targets(false)(DeterminismMode::kInvariant);
  const CellResult real = run_variation(t, DeterminismMode::kInvariant, v6);
  EXPECT_EQ(real.state, CellResult::State::kHolds) << real.text();
  v6.cases[0].b.engine.scheduler.kv.n_blocks = 0;  // back to the 4096-token pool
  v6.cases[0].b.engine.kv_cache_tokens = 4096;
  const CellResult roomy = run_variation(t, DeterminismMode::kInvariant, v6);
  EXPECT_EQ(roomy.state, CellResult::State::kNotExercised) << roomy.text();
  EXPECT_NE(roomy.text().find("no sequence was preempted"), std::string::npos) << roomy.text();
  // And in the table: "not exercised", with the reason listed under it.
  GuaranteeMatrix m;
  m.modes = {DeterminismMode::kInvariant};
  m.variations = {v6};
  m.cells = {{roomy}};
  const std::string md = m.markdown();
  EXPECT_NE(md.find("| not exercised |"), std::string::npos) << md;
  EXPECT_EQ(md.find("holds"), std::string::npos) << md;
}

void expect_cpu_modes_hold_everything(const GuaranteeMatrix& m,
                                      const std::vector<DeterminismMode>& modes) {
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

// Every CPU mode on the fixture's model: the matrix printed, every expressible cell holds.
void GuaranteeMatrixTest::check_every_cpu_mode() {
  const std::vector<DeterminismMode> modes = {DeterminismMode::kInvariant,
                                              DeterminismMode::kBiNaive, DeterminismMode::kPadded,
                                              DeterminismMode::kVerified};
  const GuaranteeMatrix m = run_matrix(targets(false), modes, build_variations(spec()));
  std::printf("%s", m.markdown().c_str());
  expect_cpu_modes_hold_everything(m, modes);
}

// Every mode runs a mixture-of-experts model and holds every variation it can express.
TEST_F(GuaranteeMatrixTest, CpuModesHoldEverythingOnMoe) {
  use_model("tiny-qwen3-moe");
  check_every_cpu_mode();
}

TEST_F(GuaranteeMatrixTest, CpuModesHoldEverything) { check_every_cpu_mode(); }

// A GGUF mixture-of-experts file with quantized experts (the experts stacked in
// blk.N.ffn_*_exps as Q8_0 blocks, cut per expert at load, run by the quantized CPU matmul):
// the invariant mode holds every variation.
TEST_F(GuaranteeMatrixTest, InvariantHoldsEverythingOnQuantizedGgufMoe) {
  const ModelConfig c = synthetic_config("tiny-qwen3-moe");
  ModelWeights w = make_synthetic_weights(c, 42);
  quantize_synthetic_weights(w, DType::kQ8_0);
  const auto path = std::filesystem::temp_directory_path() /
                    fmt::format("detllm-matrix-moe-q8-{}.gguf", ::getpid());
  {
    const std::vector<uint8_t> bytes = testing::moe_gguf_bytes(c, w);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  std::unique_ptr<LoadedModel> loaded = load_model(path.string());
  std::filesystem::remove(path);
  ASSERT_EQ(loaded->config.moe.n_experts, 16);
  ASSERT_EQ(loaded->weights.layers.at(0).experts.at(0).w_up.w.dtype, DType::kQ8_0);
  name_ = "tiny-qwen3-moe@q8_0.gguf";
  config_ = loaded->config;
  weights_ = std::move(loaded->weights);
  const std::vector<DeterminismMode> modes = {DeterminismMode::kInvariant};
  const GuaranteeMatrix m = run_matrix(targets(false), modes, build_variations(spec()));
  std::printf("%s", m.markdown().c_str());
  expect_cpu_modes_hold_everything(m, modes);
}

// The matrix's own FP8 models (make_matrix_model "NAME@fp8g": 128x128-block projections with
// per-group activations) with the FP8 KV cache: the invariant mode holds every variation.
TEST_F(GuaranteeMatrixTest, InvariantHoldsEverythingOnFp8BlocksAndFp8Kv) {
  const auto mm = make_matrix_model("tiny-llama@fp8g");
  ASSERT_TRUE(has_fp8_weights(mm->weights));
  EXPECT_EQ(fp8_class_name(mm->weights), "fp8=block128/token-group128");
  EXPECT_NE(mm->conditions.find("128x128"), std::string::npos) << mm->conditions;
  EXPECT_FALSE(has_fp8_weights(make_matrix_model("tiny-llama")->weights));
  const std::vector<DeterminismMode> modes = {DeterminismMode::kInvariant};
  const GuaranteeMatrix m = run_matrix(
      [&](DeterminismMode) {
        Target t = mm->target();
        t.make_ops = [](int n) { return kernels::make_cpu_ops(n, CpuActivations::kF32, true); };
        return t;
      },
      modes, build_variations(spec()));
  std::printf("%s", m.markdown().c_str());
  expect_cpu_modes_hold_everything(m, modes);
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
  // V9 (fresh engine) and V11 (thread counts) compare runs batched alike: they still hold.
  ASSERT_EQ(m.variations[8].id, "V9");
  EXPECT_EQ(m.cells[8][0].state, CellResult::State::kHolds) << m.cells[8][0].text();
  ASSERT_EQ(m.variations[10].id, "V11");
  EXPECT_EQ(m.cells[10][0].state, CellResult::State::kHolds) << m.cells[10][0].text();
}

}  // namespace
}  // namespace detllm::conformance
