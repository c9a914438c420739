// The FP8 GEMM's fast path for requests that do not ask for reproducibility: cuBLASLt's FP8
// matmul (E4M3 A and B, fp32 output) with the per-row activation scales and per-channel weight
// scales as cuBLASLt's outer-vector scales (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F),
//   y (m, n) = (Σ_k dec(xq[r,k]) · dec(w[c,k])) · x_scale[r] · w_scale[c]
// — launch_fp8_gemm's formula, with cuBLASLt's own order and precision of the sum, chosen by
// its heuristic per (m, n, k): the bits may change with m (and with the library version), so it
// is never used for a deterministic request. Fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM)
// stays off: cuBLASLt then promotes the FP8 tensor cores' partial sums to fp32 itself.
// Where this cuBLASLt has no outer-vector scales for the problem (the heuristic finds no
// algorithm, or refuses the scale modes, as on sm_90 with cuBLAS 13.0), the same product runs
// unscaled (scalar scales 1: the plain FP8 TN matmul, fp32 output) and
// launch_fp8_scale_outer then multiplies each element by x_scale[r] and w_scale[c].
// Test: test_cuda --gtest_filter='CudaFp8Lt*' (within the wgmma kernel's bound of the exact
// sum); bench: cuda_fp8_bench's "lt fp8" column.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

namespace detllm::kernels::cuda {

class Fp8LtGemm {
 public:
  Fp8LtGemm();
  ~Fp8LtGemm();
  Fp8LtGemm(const Fp8LtGemm&) = delete;
  Fp8LtGemm& operator=(const Fp8LtGemm&) = delete;

  // xq (m, k), w (n, k) E4M3 codes, 16-byte aligned, k % 16 == 0; x_scale (m), w_scale (n),
  // y (m, n) fp32. CUBLAS_STATUS_NOT_SUPPORTED when this cuBLASLt has no algorithm for the
  // problem in either form (outer-vector scales, or unscaled + launch_fp8_scale_outer). The
  // first call of a shape asks the heuristic (not allowed while the stream is being captured
  // into a CUDA graph).
  cublasStatus_t run(const uint8_t* xq, const float* x_scale, int32_t m, const uint8_t* w,
                     const float* w_scale, int64_t n, int64_t k, float* y, cudaStream_t stream);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    bool outer_scales = true;  // false: unscaled, then launch_fp8_scale_outer
  };
  Plan& plan(int32_t m, int64_t n, int64_t k);
  // One form of the plan: the descriptor, layouts and the heuristic's algorithm.
  cublasStatus_t make_plan(Plan& p, int32_t m, int64_t n, int64_t k, bool outer_scales);
  static void destroy(Plan& p);

  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::tuple<int32_t, int64_t, int64_t>, Plan> plans_;
};

}  // namespace detllm::kernels::cuda
