// The startup self-check (design.md Rule 3, verify/self_check.h) on the GPU with
// Llama-3.1-8B's shapes: the invariant kernels pass every check; the fast path (default cuBLAS
// GEMM) fails the GEMM check of o_proj 4096->4096 — cuBLAS changes a row's bits with M
// (docs/cuda.md) — while its attention and RMSNorm (the same kernels in both modes) pass; with
// FP8 projections the invariant FP8 linear passes too.
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaSelfCheck*' (skips without a GPU).
#include <gtest/gtest.h>

#include <cstdio>

#include "cuda/cuda_test_util.h"
#include "model/synthetic.h"
#include "verify/self_check.h"

namespace detllm::kernels {
namespace {

using namespace cuda_testing;

SelfCheckReport check_8b(Ops& ops) {
  const SelfCheckReport r =
      run_self_check(ops, self_check_options_for(synthetic_config("llama-3.1-8b")));
  std::printf("%s", r.describe().c_str());
  return r;
}

TEST(CudaSelfCheck, InvariantModePassesOnLlama8BShapes) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  const SelfCheckReport r = check_8b(*ops);
  EXPECT_TRUE(r.passed()) << r.describe();
  // q/o, k/v, gate/up, down, fused qkv, fused gate_up, lm_head, attention, rmsnorm.
  EXPECT_EQ(r.checks.size(), 9u) << r.describe();
  for (const SelfCheckResult& c : r.checks) {
    EXPECT_GE(c.n_variants, 5) << c.name;
  }
  // A startup cost, not a benchmark: generous bound.
  EXPECT_LT(r.elapsed_ms, 30000.0);
}

// With FP8 projections (--quantization fp8 or an FP8 checkpoint) the projections' GEMMs are
// checked on the FP8 linear (the per-row quantizer and the FP8 wgmma GEMM): the invariant
// backend passes them on the 8B shapes.
TEST(CudaSelfCheck, InvariantModePassesTheFp8ProjectionsOnLlama8BShapes) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  const SelfCheckReport r =
      run_self_check(*ops, self_check_options_for(synthetic_config("llama-3.1-8b"), 16, true));
  std::printf("%s", r.describe().c_str());
  EXPECT_TRUE(r.passed()) << r.describe();
  int fp8 = 0;
  for (const SelfCheckResult& c : r.checks) fp8 += c.name.find(" fp8") != std::string::npos;
  EXPECT_EQ(fp8, 6) << r.describe();  // q/o, k/v, gate/up, down, fused qkv, fused gate_up
  EXPECT_LT(r.elapsed_ms, 30000.0);
}

TEST(CudaSelfCheck, FastModeFailsTheOProjGemm) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = fast_ops();
  const SelfCheckReport r = check_8b(*ops);
  EXPECT_FALSE(r.passed()) << "default cuBLAS passed the self-check on every shape";
  const SelfCheckResult* o_proj = nullptr;
  for (const SelfCheckResult& c : r.checks) {
    if (c.name.find("o_proj") != std::string::npos &&
        c.name.find("4096->4096") != std::string::npos) {
      o_proj = &c;
    }
    // Only the GEMM differs between the modes.
    if (c.name.rfind("gemm ", 0) != 0) {
      EXPECT_TRUE(c.passed) << c.name << ": " << c.failure();
    }
  }
  ASSERT_NE(o_proj, nullptr) << r.describe();
  EXPECT_FALSE(o_proj->passed) << r.describe();
  ASSERT_TRUE(o_proj->mismatch.has_value()) << o_proj->failure();  // bits, not an error
  std::printf("[fast path] %s: %s\n", o_proj->name.c_str(), o_proj->failure().c_str());
  EXPECT_EQ(SelfCheckVerdict::of(r).state, SelfCheckState::kFailed);
}

}  // namespace
}  // namespace detllm::kernels
