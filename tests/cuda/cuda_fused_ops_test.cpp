// The CUDA fused ops (kernels/cuda/fused.cu, the bf16-output attention, the bf16-input GEMM)
// equal the CUDA op sequences they replace, bit for bit, with their GEMM inputs the sequence's
// fp32 results rounded to bf16 (tests/kernels/fused_ops_checks.h), on both KV dtypes.
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaFused*' (skips without a GPU).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/cuda/cuda_kernels.h"
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

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(T) * a.size()) == 0;
}

// The row held in registers (row_reduce.cuh) gives the loop's bits — add_rmsnorm with and
// without the residual add (its bf16 output and the updated residual) and rmsnorm — at dims
// inside, at and just past each register bucket's edge, with every bucket that fits forced;
// a forced bucket too small for the row is refused.
TEST(CudaFusedOps, RowInRegistersEqualsTheLoop) {
  DETLLM_SKIP_WITHOUT_GPU();
  for (const int dim : {64, 576, 1000, 1024, 1025, 2048, 2049, 4096, 5120, 8192}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    const int n = 3;
    const size_t cells = size_t(n) * dim;
    const std::vector<float> x = fast_random_floats(cells, 31, -3.0f, 3.0f);
    const std::vector<float> y = fast_random_floats(cells, 32, -2.0f, 2.0f);
    const std::vector<float> w = fast_random_floats(static_cast<size_t>(dim), 33, 0.5f, 1.5f);
    // Arrays of the ops' memory; the launches run on the legacy stream, so each is followed by
    // a device-wide synchronize before the ops download.
    auto ops = invariant_ops();
    DeviceArray<float> dx(*ops, cells), dy(*ops, y), dw(*ops, w), df(*ops, cells);
    DeviceArray<uint16_t> db(*ops, cells);
    auto add_norm = [&](int regs, bool with_y) {
      dx.upload(x);
      const cudaError_t err = cuda::launch_add_rmsnorm(
          dx.data(), with_y ? dy.data() : nullptr, dw.data(), n, dim, 1e-5f,
          reinterpret_cast<__nv_bfloat16*>(db.data()), nullptr, false, regs);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      return std::make_pair(err, std::make_pair(db.download(), dx.download()));
    };
    auto norm = [&](int regs) {
      dx.upload(x);
      const cudaError_t err =
          cuda::launch_rmsnorm(dx.data(), dw.data(), n, dim, 1e-6f, df.data(), nullptr, regs);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      return std::make_pair(err, df.download());
    };
    for (const bool with_y : {false, true}) {
      const auto loop = add_norm(0, with_y);
      ASSERT_EQ(loop.first, cudaSuccess);
      const auto loop_norm = norm(0);
      ASSERT_EQ(loop_norm.first, cudaSuccess);
      for (const int regs : {-1, 4, 8, 16, 32}) {
        SCOPED_TRACE(::testing::Message() << "row_regs " << regs << " y " << with_y);
        const auto got = add_norm(regs, with_y);
        const auto got_norm = norm(regs);
        if (regs > 0 && regs * 256 < dim) {
          EXPECT_EQ(got.first, cudaErrorInvalidValue);
          EXPECT_EQ(got_norm.first, cudaErrorInvalidValue);
          continue;
        }
        ASSERT_EQ(got.first, cudaSuccess);
        ASSERT_EQ(got_norm.first, cudaSuccess);
        EXPECT_TRUE(same_bits(got.second.first, loop.second.first)) << "add_rmsnorm output";
        EXPECT_TRUE(same_bits(got.second.second, loop.second.second)) << "add_rmsnorm residual";
        EXPECT_TRUE(same_bits(got_norm.second, loop_norm.second)) << "rmsnorm";
      }
    }
  }
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
