// The startup self-check (design.md Rule 3, verify/self_check.h) on the CPU backend: it
// passes on the tiny models and the default model's shapes (quickly), and — negative controls —
// it FAILS, naming the right check, on decorator backends whose GEMM depends on M, whose
// attention depends on the query count or the page layout, or whose RMSNorm depends on the row
// count. An engine given a failed verdict refuses deterministic requests and serves the others.
// Run: build/tests/test_conformance --gtest_filter='SelfCheck*'
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "conformance/delegating_ops.h"
#include "conformance/fault_ops.h"
#include "engine/engine.h"
#include "kernels/ops.h"
#include "model/synthetic.h"
#include "verify/self_check.h"

namespace detllm {
namespace {

using conformance::DelegatingOps;  // conformance/delegating_ops.h

// A GEMM that switches kernels at M >= 64 (like cuBLAS's heuristics): one ulp off there.
class BatchDependentGemm final : public DelegatingOps {
 public:
  void matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
              float* y, NumericsMode numerics) override {
    inner_->matmul(x, m, w, bias, y, numerics);
    if (m >= 64) nudge(y, int64_t{m} * w.rows);
  }
};

// Attention whose result depends on how many query tokens share the call (a split-KV count
// chosen from the batch): one ulp off for single-token (decode) steps.
class QueryCountDependentAttention final : public DelegatingOps {
 public:
  void attention(const float* q, const kernels::KvCacheLayer& c, const kernels::StepBatch& b,
                 int32_t h, float s, float* out) override {
    inner_->attention(q, c, b, h, s, out);
    if (b.n_tokens == 1) nudge(out, int64_t{h} * c.head_dim);
  }
};

// Attention whose result depends on where the blocks sit (e.g. an alignment-dependent path):
// off by one ulp when the first sequence's first block is not physical block 0.
class LayoutDependentAttention final : public DelegatingOps {
 public:
  void attention(const float* q, const kernels::KvCacheLayer& c, const kernels::StepBatch& b,
                 int32_t h, float s, float* out) override {
    inner_->attention(q, c, b, h, s, out);
    if (b.block_tables[0] != 0) nudge(out, int64_t{b.n_tokens} * h * c.head_dim);
  }
};

// RMSNorm that reduces differently for a single row.
class RowCountDependentNorm final : public DelegatingOps {
 public:
  void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
               float* out) override {
    inner_->rmsnorm(x, w, n, dim, eps, out);
    if (n == 1) nudge(out, dim);
  }
};

// SmolLM2-135M-Instruct's shapes (the embedded default model), without loading it.
ModelConfig default_model_shapes() {
  ModelConfig c = synthetic_config("tiny-llama");
  c.vocab_size = 49152;
  c.dim = 576;
  c.n_heads = 9;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  c.ffn_dim = 1536;
  c.n_layers = 30;
  return c;
}

// The names of the failing checks, space-separated.
std::string failing(const SelfCheckReport& r) {
  std::string s;
  for (const auto& c : r.checks) {
    if (!c.passed) s += c.name + " | ";
  }
  return s;
}

TEST(SelfCheck, PassesOnCpuForTinyModels) {
  auto ops = kernels::make_cpu_ops(2);
  for (const char* name : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    const SelfCheckReport r =
        run_self_check(*ops, self_check_options_for(synthetic_config(name), 4));
    EXPECT_TRUE(r.passed()) << name << "\n" << r.describe();
    EXPECT_EQ(r.backend, ops->name());
    for (const auto& c : r.checks) {
      EXPECT_TRUE(c.passed) << c.name << ": " << c.failure();
      EXPECT_GE(c.n_variants, 3) << c.name;
      EXPECT_FALSE(c.mismatch.has_value());
    }
    EXPECT_NE(r.summary().find("checks passed"), std::string::npos) << r.summary();
  }
}

// A model with FP8 projections: their GEMMs are checked as FP8 rows (the backend's FP8 linear),
// lm_head as stored; the CPU's FP8 kernel passes.
// Per channel and in 128-column blocks (per-token or per-group activations): each row type is
// checked as itself.
TEST(SelfCheck, Fp8ProjectionsAreCheckedAsFp8AndPassOnCpu) {
  auto ops = kernels::make_cpu_ops(2);
  for (DType t : {DType::kF8E4M3, DType::kF8E4M3B128, DType::kF8E4M3G128}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const SelfCheckOptions o = self_check_options_for(synthetic_config("tiny-qwen3"), 4, true, t);
    int fp8 = 0;
    for (const SelfCheckGemm& g : o.gemms) {
      EXPECT_EQ(g.fp8, g.name != "lm_head") << g.name;
      if (g.fp8) {
        EXPECT_EQ(g.fp8_rows, t) << g.name;
      }
      fp8 += g.fp8;
    }
    EXPECT_GE(fp8, 4);
    const SelfCheckReport r = run_self_check(*ops, o);
    EXPECT_TRUE(r.passed()) << r.describe();
    int fp8_checks = 0, named = 0;
    for (const auto& c : r.checks) {
      fp8_checks += c.name.find(" fp8") != std::string::npos;
      named += t == DType::kF8E4M3 || c.name.find(dtype_name(t)) != std::string::npos;
    }
    EXPECT_EQ(fp8_checks, fp8);
    if (t != DType::kF8E4M3) {
      EXPECT_EQ(named, fp8) << "block checks name their row type";
    }
  }
}

// The negative control: FP8 matmuls with one activation scale for the whole call (a per-tensor
// dynamic scale, fault_ops.h fp8-batch-scale) fail every FP8 GEMM check, per channel and in
// blocks; the rest pass.
TEST(SelfCheck, CatchesABatchWideFp8ActivationScale) {
  conformance::Fp8BatchScaleOps ops(2);
  for (DType t : {DType::kF8E4M3, DType::kF8E4M3G128}) {
    const SelfCheckReport r = run_self_check(
        ops, self_check_options_for(synthetic_config("tiny-llama"), 4, true, t));
    std::printf("%s", r.describe().c_str());
    ASSERT_FALSE(r.passed()) << "the self-check missed a batch-wide FP8 activation scale ("
                             << dtype_name(t) << ")";
    for (const auto& c : r.checks) {
      const bool fp8 = c.name.find(" fp8") != std::string::npos;
      EXPECT_EQ(c.passed, !fp8) << c.name << ": " << c.failure();
    }
  }
}

TEST(SelfCheck, OptionsCoverTheModelShapes) {
  // tiny-qwen2 has a qkv bias; tiny-qwen3 normalizes q/k heads (a second RMSNorm width).
  const ModelConfig c = synthetic_config("tiny-qwen3");
  const SelfCheckOptions o = self_check_options_for(c, 8);
  auto has = [&](int n, int k) {
    for (const auto& g : o.gemms)
      if (g.n == n && g.k == k) return true;
    return false;
  };
  EXPECT_TRUE(has(c.q_dim(), c.dim));
  EXPECT_TRUE(has(c.kv_dim(), c.dim));
  EXPECT_TRUE(has(c.dim, c.q_dim()));
  EXPECT_TRUE(has(c.ffn_dim, c.dim));
  EXPECT_TRUE(has(c.dim, c.ffn_dim));
  EXPECT_TRUE(has(c.vocab_size, c.dim));
  EXPECT_TRUE(has(c.q_dim() + 2 * c.kv_dim(), c.dim));  // the fused shapes
  EXPECT_TRUE(has(2 * c.ffn_dim, c.dim));
  ASSERT_EQ(o.attention.size(), 1u);
  EXPECT_EQ(o.attention[0].block_size, 8);
  EXPECT_EQ(o.attention[0].n_heads, c.n_heads);
  EXPECT_EQ(o.rmsnorm_dims.size(), 2u);
  for (const auto& g : self_check_options_for(synthetic_config("tiny-qwen2")).gemms) {
    if (g.name.find("q_proj") != std::string::npos) {
      EXPECT_TRUE(g.bias) << g.name;
    }
  }
}

TEST(SelfCheck, DefaultModelShapesPassWellUnderTwoSeconds) {
  auto ops = kernels::make_cpu_ops(2);
  const SelfCheckReport r = run_self_check(*ops, self_check_options_for(default_model_shapes()));
  std::printf("%s", r.describe().c_str());
  EXPECT_TRUE(r.passed()) << r.describe();
  // Generous: the machine running the tests is shared; typically a few hundred ms.
  EXPECT_LT(r.elapsed_ms, 4000.0);
}

TEST(SelfCheck, CatchesBatchDependentGemm) {
  BatchDependentGemm ops;
  const SelfCheckReport r =
      run_self_check(ops, self_check_options_for(synthetic_config("tiny-llama"), 4));
  std::printf("%s", r.describe().c_str());
  ASSERT_FALSE(r.passed()) << "the self-check missed a batch-dependent GEMM";
  // Every GEMM checked up to m = 256 fails (the reference batch is off by one ulp; m = 1 is the
  // first variant compared with it); lm_head, checked up to m = 16, stays below the switch
  // and passes, as do attention and RMSNorm.
  for (const auto& c : r.checks) {
    const bool must_fail =
        c.name.rfind("gemm ", 0) == 0 && c.name.find("lm_head") == std::string::npos;
    EXPECT_EQ(c.passed, !must_fail) << c.name << ": " << c.failure();
    if (must_fail) {
      ASSERT_TRUE(c.mismatch.has_value()) << c.name;
      EXPECT_EQ(c.mismatch->variant, "m=1 vs m=256");
      EXPECT_EQ(c.mismatch->row, 0);
      EXPECT_EQ(c.mismatch->column, 0);
      EXPECT_NE(c.mismatch->reference, c.mismatch->value);
    }
  }
  EXPECT_EQ(r.first_failure()->name.rfind("gemm ", 0), 0u);
  EXPECT_NE(r.summary().find("FAILED"), std::string::npos);
}

TEST(SelfCheck, CatchesQueryCountDependentAttention) {
  QueryCountDependentAttention ops;
  const SelfCheckReport r =
      run_self_check(ops, self_check_options_for(synthetic_config("tiny-llama"), 4));
  ASSERT_FALSE(r.passed()) << "the self-check missed a chunk-dependent attention";
  const SelfCheckResult* f = r.first_failure();
  EXPECT_EQ(f->name.rfind("attention ", 0), 0u) << f->name;
  EXPECT_EQ(r.n_failed(), 1) << failing(r);
  ASSERT_TRUE(f->mismatch.has_value());
  EXPECT_EQ(f->mismatch->variant, "decode (chunks of 1) vs whole prefill");
  EXPECT_EQ(f->mismatch->row, 0);  // position 0 is the first decode step
  std::printf("caught: %s\n", r.summary().c_str());
}

TEST(SelfCheck, CatchesLayoutDependentAttention) {
  LayoutDependentAttention ops;
  const SelfCheckReport r =
      run_self_check(ops, self_check_options_for(synthetic_config("tiny-llama"), 4));
  ASSERT_FALSE(r.passed()) << "the self-check missed a page-layout-dependent attention";
  EXPECT_EQ(r.n_failed(), 1) << failing(r);
  ASSERT_TRUE(r.first_failure()->mismatch.has_value());
  EXPECT_EQ(r.first_failure()->mismatch->variant, "shuffled pages vs whole prefill");
}

TEST(SelfCheck, CatchesRowCountDependentNorm) {
  RowCountDependentNorm ops;
  const SelfCheckReport r =
      run_self_check(ops, self_check_options_for(synthetic_config("tiny-llama"), 4));
  ASSERT_FALSE(r.passed());
  EXPECT_EQ(r.n_failed(), 1) << failing(r);
  EXPECT_EQ(r.first_failure()->name.rfind("rmsnorm ", 0), 0u) << r.first_failure()->name;
}

TEST(SelfCheck, AnOpThatThrowsFailsItsCheck) {
  class Throwing final : public DelegatingOps {
   public:
    void rmsnorm(const float*, const float*, int32_t, int32_t, float, float*) override {
      throw std::runtime_error("driver said no");
    }
  } ops;
  const SelfCheckReport r =
      run_self_check(ops, self_check_options_for(synthetic_config("tiny-llama"), 4));
  ASSERT_FALSE(r.passed());
  EXPECT_NE(r.first_failure()->failure().find("driver said no"), std::string::npos);
  EXPECT_NE(r.describe().find("FAILED"), std::string::npos);
}

TEST(SelfCheck, VerdictAndStateNames) {
  SelfCheckReport passed;
  passed.checks.push_back({"gemm x 4->4", true, 3, std::nullopt, "", 0.1});
  EXPECT_EQ(SelfCheckVerdict::of(passed).state, SelfCheckState::kPassed);
  SelfCheckReport failed = passed;
  failed.checks.push_back(
      {"gemm y 8->8", false, 1, SelfCheckMismatch{"m=1 vs m=256", 0, 3, 1.0f, 2.0f}, "", 0.1});
  const SelfCheckVerdict v = SelfCheckVerdict::of(failed);
  EXPECT_EQ(v.state, SelfCheckState::kFailed);
  EXPECT_TRUE(v.refuses_deterministic());
  EXPECT_NE(v.failure.find("gemm y 8->8: m=1 vs m=256: row 0 column 3"), std::string::npos)
      << v.failure;
  EXPECT_NE(v.refusal_message().find("detllm check"), std::string::npos);
  EXPECT_EQ(self_check_state_name(SelfCheckState::kPassed), "passed");
  EXPECT_EQ(self_check_state_name(SelfCheckState::kFailed), "failed");
  EXPECT_EQ(self_check_state_name(SelfCheckState::kNotRun), "not_run");
  EXPECT_EQ(self_check_state_name(SelfCheckState::kDisabled), "disabled");
}

// An engine built with a failed self-check refuses deterministic requests (with the reason)
// and still serves non-deterministic ones.
class SelfCheckEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = synthetic_config("tiny-llama");
    weights_ = make_synthetic_weights(config_, 3);
    ops_ = kernels::make_cpu_ops(2);
    model_ = std::make_unique<LlamaModel>(config_, weights_, *ops_);
  }
  engine::EngineConfig engine_config(SelfCheckVerdict v) const {
    engine::EngineConfig c;
    c.scheduler.kv.block_size = 4;
    c.kv_cache_tokens = 512;
    c.self_check = std::move(v);
    return c;
  }
  engine::Request request(std::optional<bool> deterministic) const {
    engine::Request r;
    for (int i = 0; i < 7; ++i) r.prompt.push_back((i * 37 + 5) % config_.vocab_size);
    r.max_tokens = 4;
    r.sampling.temperature = 0;
    r.deterministic = deterministic;
    return r;
  }
  // Tokens generated for r, or throws what add_request throws.
  std::vector<int32_t> generate(engine::Engine& e, engine::Request r) {
    std::vector<int32_t> toks;
    engine::RequestCallbacks cb;
    cb.on_token = [&](const engine::TokenEvent& ev) { toks.push_back(ev.token); };
    e.add_request(std::move(r), cb);
    e.run_until_idle();
    return toks;
  }
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<kernels::Ops> ops_;
  std::unique_ptr<LlamaModel> model_;
};

TEST_F(SelfCheckEngine, FailedCheckRefusesDeterministicRequestsOnly) {
  // The verdict of a real failing run (a batch-dependent GEMM), as detllm serve builds it.
  BatchDependentGemm bad;
  const SelfCheckReport report = run_self_check(bad, self_check_options_for(config_, 4));
  ASSERT_FALSE(report.passed());
  engine::Engine e(*model_, engine_config(SelfCheckVerdict::of(report)));
  EXPECT_FALSE(e.deterministic_allowed());

  for (std::optional<bool> det : {std::optional<bool>(true), std::optional<bool>()}) {
    try {
      generate(e, request(det));
      ADD_FAILURE() << "a deterministic request was accepted after a failed self-check";
    } catch (const engine::SelfCheckRefusal& ex) {
      const std::string msg = ex.what();
      EXPECT_NE(msg.find("self-check failed"), std::string::npos) << msg;
      EXPECT_NE(msg.find("gemm "), std::string::npos) << msg;         // what failed
      EXPECT_NE(msg.find("detllm check"), std::string::npos) << msg;  // what to do
    }
  }
  EXPECT_FALSE(e.has_work());
  // Non-deterministic requests run, and give what a healthy engine gives them.
  const std::vector<int32_t> got = generate(e, request(false));
  EXPECT_EQ(got.size(), 4u);
  engine::Engine healthy(*model_, engine_config({SelfCheckState::kPassed, {}}));
  EXPECT_EQ(got, generate(healthy, request(false)));
}

TEST_F(SelfCheckEngine, PassedNotRunAndDisabledServeEverything) {
  for (SelfCheckState s : {SelfCheckState::kPassed, SelfCheckState::kNotRun}) {
    engine::Engine e(*model_, engine_config({s, {}}));
    EXPECT_TRUE(e.deterministic_allowed());
    EXPECT_EQ(generate(e, request(true)).size(), 4u);
  }
  // --no-self-check: the policy flag off makes the verdict "disabled" whatever was passed.
  engine::EngineConfig c = engine_config({SelfCheckState::kFailed, "stale"});
  c.policy.self_check = false;
  engine::Engine e(*model_, c);
  EXPECT_EQ(e.config().self_check.state, SelfCheckState::kDisabled);
  EXPECT_EQ(generate(e, request(true)).size(), 4u);
}

}  // namespace
}  // namespace detllm
