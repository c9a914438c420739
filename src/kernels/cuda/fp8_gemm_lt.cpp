// See fp8_gemm_lt.h.
#include "kernels/cuda/fp8_gemm_lt.h"

#include "kernels/cuda/fp8_launch.h"

#include <stdexcept>
#include <tuple>
#include <string>

namespace detllm::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

}  // namespace

Fp8LtGemm::Fp8LtGemm() {
  if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cuBLASLt FP8 GEMM: cublasLtCreate failed (is a GPU present?)");
  if (cudaMalloc(&workspace_, kWorkspaceBytes) != cudaSuccess)
    throw std::runtime_error("cuBLASLt FP8 GEMM: cannot allocate its 32 MiB workspace");
  workspace_bytes_ = kWorkspaceBytes;
}

Fp8LtGemm::~Fp8LtGemm() {
  for (auto& [key, p] : plans_) destroy(p);
  if (workspace_) cudaFree(workspace_);
  if (lt_) cublasLtDestroy(lt_);
}

void Fp8LtGemm::destroy(Plan& p) {
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.d) cublasLtMatrixLayoutDestroy(p.d);
  p.desc = nullptr;
  p.a = p.b = p.d = nullptr;
}

// Column-major, as cuBLASLt sees it: y (m, n) row-major is D (n × m, ld n) = op(A) · B with
// A = w read as a k × n column-major matrix, transposed (FP8 takes only this "TN" form), and
// B = xq as k × m. So cuBLASLt's A scale vector (its M = n elements) is w_scale and its B scale
// vector (its N = m) is x_scale.
cublasStatus_t Fp8LtGemm::make_plan(Plan& p, int32_t m, int64_t n, int64_t k, bool outer_scales) {
  p.outer_scales = outer_scales;
  cublasStatus_t st = cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const int8_t fast_accum = 0;
  for (auto [attr, ptr, size] :
       {std::make_tuple(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<const void*>(&ta), sizeof(ta)),
        std::make_tuple(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<const void*>(&tb), sizeof(tb)),
        std::make_tuple(CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<const void*>(&fast_accum),
                        sizeof(fast_accum))}) {
    if ((st = cublasLtMatmulDescSetAttribute(p.desc, attr, ptr, size)) != CUBLAS_STATUS_SUCCESS)
      return st;
  }
  if (outer_scales) {
    const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    for (auto attr : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE}) {
      if ((st = cublasLtMatmulDescSetAttribute(p.desc, attr, &outer, sizeof(outer))) !=
          CUBLAS_STATUS_SUCCESS)
        return st;
    }
    // Placeholder scale pointers for the heuristic (the real ones are set at each call).
    const void* none = nullptr;
    cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &none,
                                   sizeof(none));
    cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &none,
                                   sizeof(none));
  }
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  if ((st = cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, u(k), u(n), k)) != CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, u(k), u(m), k)) != CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, u(n), u(m), n)) != CUBLAS_STATUS_SUCCESS)
    return st;
  cublasLtMatmulPreference_t pref = nullptr;
  if ((st = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS) return st;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace_bytes_, sizeof(workspace_bytes_));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  st = cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (found == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  p.algo = result.algo;
  return CUBLAS_STATUS_SUCCESS;
}

// The outer-vector form first; where this cuBLASLt refuses it, the unscaled one.
Fp8LtGemm::Plan& Fp8LtGemm::plan(int32_t m, int64_t n, int64_t k) {
  const auto key = std::make_tuple(m, n, k);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan& p = plans_[key];
  p.status = make_plan(p, m, n, k, true);
  if (p.status != CUBLAS_STATUS_SUCCESS) {
    destroy(p);
    p.status = make_plan(p, m, n, k, false);
  }
  return p;
}

cublasStatus_t Fp8LtGemm::run(const uint8_t* xq, const float* x_scale, int32_t m,
                              const uint8_t* w, const float* w_scale, int64_t n, int64_t k,
                              float* y, cudaStream_t stream) {
  if (m == 0) return CUBLAS_STATUS_SUCCESS;
  if (m < 0 || n <= 0 || k <= 0 || k % 16 != 0) return CUBLAS_STATUS_INVALID_VALUE;
  Plan& p = plan(m, n, k);
  if (p.status != CUBLAS_STATUS_SUCCESS) return p.status;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (p.outer_scales) {
    st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale,
                                        sizeof(w_scale));
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale,
                                          sizeof(x_scale));
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }
  const float one = 1.0f, zero = 0.0f;
  st = cublasLtMatmul(lt_, p.desc, &one, w, p.a, xq, p.b, &zero, y, p.d, y, p.d, &p.algo,
                      workspace_, workspace_bytes_, stream);
  if (p.outer_scales && (st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_NOT_SUPPORTED)) {
    // The heuristic offered an algorithm the matmul then refused with these scales: this
    // shape's plan becomes the unscaled form, and the call runs on it.
    destroy(p);
    p.status = make_plan(p, m, n, k, false);
    if (p.status != CUBLAS_STATUS_SUCCESS) return p.status;
    st = cublasLtMatmul(lt_, p.desc, &one, w, p.a, xq, p.b, &zero, y, p.d, y, p.d, &p.algo,
                        workspace_, workspace_bytes_, stream);
  }
  if (st != CUBLAS_STATUS_SUCCESS || p.outer_scales) return st;
  return launch_fp8_scale_outer(y, x_scale, w_scale, m, n, stream) == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace detllm::kernels::cuda
