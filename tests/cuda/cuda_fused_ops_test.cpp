// The CUDA fused ops (kernels/cuda/fused.cu, the bf16-output attention, the bf16-input GEMM)
// equal the CUDA op sequences they replace, bit for bit, with their GEMM inputs the sequence's
// fp32 results rounded to bf16 (tests/kernels/fused_ops_checks.h), on both KV dtypes.
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaFused*' (skips without a GPU).
#include <gtest/gtest.h>

#include "cuda/cuda_test_util.h"
#include "kernels/fused_ops_checks.h"
#include "model/projection_layout_checks.h"
#include "model/synthetic.h"

namespace detllm::kernels {
namespace {

using namespace cuda_testing;

TEST(CudaFusedOps, AddRmsnormIsAddThenRmsnorm) {
  DETLLM_SKIP_WITHOUT_GPU();
  testing::check_add_rmsnorm(*invariant_ops());
}

TEST(CudaFusedOps, MatmulRoundedIsMatmulIntoItsColumns) {
  DETLLM_SKIP_WITHOUT_GPU();
  testing::check_matmul_rounded(*invariant_ops());  // the invariant kernel and verified plans
  CudaOptions no_lt;
  no_lt.gemm_lt = false;  // the invariant kernel alone (its bf16-input small tiles)
  testing::check_matmul_rounded(*make_cuda_ops(no_lt));
  testing::check_matmul_rounded(*fast_ops());  // default cuBLAS, the same call either way
}

TEST(CudaFusedOps, QkvRopeAppendIsNormRopeAppendApart) {
  DETLLM_SKIP_WITHOUT_GPU();
  testing::check_qkv_rope_append(*invariant_ops(-1, DType::kBF16));
  testing::check_qkv_rope_append(*invariant_ops(-1, DType::kF32));
}

TEST(CudaFusedOps, SiluMulRowsIsSiluMulOnTheHalves) {
  DETLLM_SKIP_WITHOUT_GPU();
  testing::check_silu_mul_rows(*invariant_ops());
}

// The whole model: q/k/v and gate/up fused at load (one GEMM each, kAuto's choice here) equal
// the parts run apart, on the invariant numerics, with a bf16 and an fp32 KV cache.
TEST(CudaFusedOps, FusedProjectionsEqualSeparateOnesInTheModel) {
  DETLLM_SKIP_WITHOUT_GPU();
  for (const char* name : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    for (DType kv : {DType::kBF16, DType::kF32}) {
      auto ops = invariant_ops(-1, kv);
      const ModelConfig c = synthetic_config(name);
      const SyntheticWeights recipe = synthetic_recipe(c, 3);
      const LlamaModel fused(c, recipe, *ops);
      EXPECT_EQ(fused.projection_layout(), ProjectionLayout::kFused);
      const LlamaModel apart(c, recipe, *ops, ProjectionLayout::kSeparate);
      detllm::testing::expect_same_logits(fused, apart,
                                          std::string(name) + " kv " + std::string(dtype_name(kv)));
    }
  }
}

}  // namespace
}  // namespace detllm::kernels
