// The FP8 quantizer fused into the producers of a GEMM input (kernels/cuda/fused.cu's _fp8
// launchers, fp8_row_quant.cuh) gives the bits of the producer followed by the FP8 linear's own
// quantizer (fp8_quant.cu): the bf16 rows, the residual, the E4M3 codes and the row scales —
// with the dynamic per-token rule, a static input scale and an activation bound, the row in
// registers and the loop, rows with zeros, NaN and values past 448 · scale. And the split-K FP8
// GEMM's in-kernel fold leaves its tile counts at zero for the next launch. The model-level
// check (the fused path really taken, the same logits) is CudaFp8Model.FusedQuantizer* in
// cuda_fp8_model_test.cpp.
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaFp8Fused*' (skips without a GPU).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_launch.h"

namespace detllm::kernels {
namespace {

using namespace cuda_testing;

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(T) * a.size()) == 0;
}

// The rules a matrix's activation parameters give (fp8_row_quant.cuh): dynamic, static, bound.
struct Rule {
  const char* name;
  std::vector<float> params;  // empty: no parameters (nullptr)
};
const Rule kRules[] = {{"dynamic", {}}, {"dynamic (zeros)", {0.0f, 0.0f}},
                       {"static", {0.0125f, 0.0f}}, {"bound", {0.0f, 1.5f}}};

// Rows whose values reach the corner cases: a zero row, a NaN, values far past the others.
std::vector<float> rows_with_corners(int n, int dim, uint64_t seed) {
  std::vector<float> x = fast_random_floats(size_t(n) * dim, seed, -3.0f, 3.0f);
  if (n > 1)
    for (int d = 0; d < dim; ++d) x[size_t(dim) + d] = 0.0f;  // row 1: zeros
  if (n > 2) {
    x[size_t(2) * dim + dim / 3] = std::numeric_limits<float>::quiet_NaN();
    x[size_t(2) * dim + dim / 2] = 900.0f;
  }
  return x;
}

TEST(CudaFp8Fused, AddRmsnormWritesTheQuantizersRows) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  for (const int dim : {64, 576, 4096, 8192, 8200}) {  // 8200: the loop, not registers
    for (const int n : {1, 3, 70}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << " n " << n);
      const size_t cells = size_t(n) * dim;
      const std::vector<float> x = rows_with_corners(n, dim, 41 + dim);
      const std::vector<float> y = fast_random_floats(cells, 42, -2.0f, 2.0f);
      const std::vector<float> w = fast_random_floats(size_t(dim), 43, 0.5f, 1.5f);
      DeviceArray<float> dx(*ops, cells), dy(*ops, y), dw(*ops, w);
      DeviceArray<uint16_t> db(*ops, cells);
      DeviceArray<uint8_t> dq(*ops, cells), dq_ref(*ops, cells);
      DeviceArray<float> ds(*ops, size_t(n)), ds_ref(*ops, size_t(n));
      auto* out = reinterpret_cast<__nv_bfloat16*>(db.data());
      for (const Rule& rule : kRules) {
        DeviceArray<float> dp(*ops, rule.params.empty() ? std::vector<float>{0, 0} : rule.params);
        const float* params = rule.params.empty() ? nullptr : dp.data();
        for (const bool with_y : {false, true}) {
          for (const int regs : {-1, 0}) {
            SCOPED_TRACE(::testing::Message() << rule.name << " y " << with_y << " regs " << regs);
            // The sequence: add_rmsnorm, then the quantizer on its bf16 rows.
            dx.upload(x);
            ASSERT_EQ(cuda::launch_add_rmsnorm(dx.data(), with_y ? dy.data() : nullptr,
                                               dw.data(), n, dim, 1e-5f, out, nullptr, false,
                                               regs),
                      cudaSuccess);
            ASSERT_EQ(cuda::launch_fp8_quantize_rows_params(db.data(), true, n, dim, params,
                                                            dq_ref.data(), ds_ref.data(), nullptr),
                      cudaSuccess);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            const std::vector<uint16_t> want_b = db.download();
            const std::vector<float> want_x = dx.download();
            // The fused kernel.
            dx.upload(x);
            const cuda::Fp8RowsOut q{dq.data(), ds.data(), params};
            ASSERT_EQ(cuda::launch_add_rmsnorm_fp8(dx.data(), with_y ? dy.data() : nullptr,
                                                   dw.data(), n, dim, 1e-5f, out, q, nullptr,
                                                   false, regs),
                      cudaSuccess);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            EXPECT_TRUE(same_bits(db.download(), want_b)) << "bf16 rows";
            EXPECT_TRUE(same_bits(dx.download(), want_x)) << "residual";
            EXPECT_TRUE(same_bits(dq.download(), dq_ref.download())) << "codes";
            EXPECT_TRUE(same_bits(ds.download(), ds_ref.download())) << "scales";
          }
        }
      }
    }
  }
}

TEST(CudaFp8Fused, SiluMulRowsWritesTheQuantizersRows) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  for (const int ffn : {1, 100, 1536, 14336}) {
    for (const int n : {1, 5, 33}) {
      SCOPED_TRACE(::testing::Message() << "ffn " << ffn << " n " << n);
      const size_t cells = size_t(n) * ffn;
      const std::vector<float> gu = rows_with_corners(n, 2 * ffn, 51 + ffn);
      DeviceArray<float> dgu(*ops, gu);
      DeviceArray<uint16_t> db(*ops, cells), db_ref(*ops, cells);
      DeviceArray<uint8_t> dq(*ops, cells), dq_ref(*ops, cells);
      DeviceArray<float> ds(*ops, size_t(n)), ds_ref(*ops, size_t(n));
      for (const Rule& rule : kRules) {
        SCOPED_TRACE(rule.name);
        DeviceArray<float> dp(*ops, rule.params.empty() ? std::vector<float>{0, 0} : rule.params);
        const float* params = rule.params.empty() ? nullptr : dp.data();
        ASSERT_EQ(cuda::launch_silu_mul_rows(dgu.data(), n, ffn,
                                             reinterpret_cast<__nv_bfloat16*>(db_ref.data()),
                                             nullptr),
                  cudaSuccess);
        ASSERT_EQ(cuda::launch_fp8_quantize_rows_params(db_ref.data(), true, n, ffn, params,
                                                        dq_ref.data(), ds_ref.data(), nullptr),
                  cudaSuccess);
        const cuda::Fp8RowsOut q{dq.data(), ds.data(), params};
        ASSERT_EQ(cuda::launch_silu_mul_rows_fp8(dgu.data(), n, ffn,
                                                 reinterpret_cast<__nv_bfloat16*>(db.data()), q,
                                                 nullptr),
                  cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_TRUE(same_bits(db.download(), db_ref.download())) << "bf16 rows";
        EXPECT_TRUE(same_bits(dq.download(), dq_ref.download())) << "codes";
        EXPECT_TRUE(same_bits(ds.download(), ds_ref.download())) << "scales";
      }
    }
  }
}

// A fused launch without somewhere to write the FP8 rows is refused, not run half.
TEST(CudaFp8Fused, NoCodesIsRefused) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  DeviceArray<float> dx(*ops, 256), dw(*ops, 256);
  DeviceArray<uint16_t> db(*ops, 256);
  auto* out = reinterpret_cast<__nv_bfloat16*>(db.data());
  EXPECT_EQ(cuda::launch_add_rmsnorm_fp8(dx.data(), nullptr, dw.data(), 1, 256, 1e-5f, out, {},
                                         nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launch_silu_mul_rows_fp8(dx.data(), 1, 128, out, {}, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace detllm::kernels
