// See fp8_gemm_lt.h.
#include "kernels/cuda/fp8_gemm_lt.h"

#include <stdexcept>
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
  for (auto& [key, p] : plans_) {
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.d) cublasLtMatrixLayoutDestroy(p.d);
  }
  if (workspace_) cudaFree(workspace_);
  if (lt_) cublasLtDestroy(lt_);
}

// Column-major, as cuBLASLt sees it: y (m, n) row-major is D (n × m, ld n) = op(A) · B with
// A = w read as a k × n column-major matrix, transposed (FP8 takes only this "TN" form), and
// B = xq as k × m. So cuBLASLt's A scale vector (its M = n elements) is w_scale and its B scale
// vector (its N = m) is x_scale.
Fp8LtGemm::Plan& Fp8LtGemm::plan(int32_t m, int64_t n, int64_t k) {
  const auto key = std::make_tuple(m, n, k);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan& p = plans_[key];
  auto fail = [&](cublasStatus_t st) -> Plan& {
    p.status = st;
    return p;
  };
  cublasStatus_t st = cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return fail(st);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  const int8_t fast_accum = 0;
  for (auto [attr, ptr, size] :
       {std::make_tuple(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<const void*>(&ta), sizeof(ta)),
        std::make_tuple(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<const void*>(&tb), sizeof(tb)),
        std::make_tuple(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, static_cast<const void*>(&outer),
                        sizeof(outer)),
        std::make_tuple(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, static_cast<const void*>(&outer),
                        sizeof(outer)),
        std::make_tuple(CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<const void*>(&fast_accum),
                        sizeof(fast_accum))}) {
    st = cublasLtMatmulDescSetAttribute(p.desc, attr, ptr, size);
    if (st != CUBLAS_STATUS_SUCCESS) return fail(st);
  }
  // Placeholder scale pointers for the heuristic (the real ones are set at each call).
  const void* none = nullptr;
  cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &none, sizeof(none));
  cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &none, sizeof(none));
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  if ((st = cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, u(k), u(n), k)) != CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, u(k), u(m), k)) != CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, u(n), u(m), n)) != CUBLAS_STATUS_SUCCESS)
    return fail(st);
  cublasLtMatmulPreference_t pref = nullptr;
  if ((st = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS) return fail(st);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace_bytes_, sizeof(workspace_bytes_));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  st = cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return fail(st);
  if (found == 0) return fail(CUBLAS_STATUS_NOT_SUPPORTED);
  p.algo = result.algo;
  return p;
}

cublasStatus_t Fp8LtGemm::run(const uint8_t* xq, const float* x_scale, int32_t m,
                              const uint8_t* w, const float* w_scale, int64_t n, int64_t k,
                              float* y, cudaStream_t stream) {
  if (m == 0) return CUBLAS_STATUS_SUCCESS;
  if (m < 0 || n <= 0 || k <= 0 || k % 16 != 0) return CUBLAS_STATUS_INVALID_VALUE;
  Plan& p = plan(m, n, k);
  if (p.status != CUBLAS_STATUS_SUCCESS) return p.status;
  cublasStatus_t st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                     &w_scale, sizeof(w_scale));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale,
                                        sizeof(x_scale));
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const float one = 1.0f, zero = 0.0f;
  return cublasLtMatmul(lt_, p.desc, &one, w, p.a, xq, p.b, &zero, y, p.d, y, p.d, &p.algo,
                        workspace_, workspace_bytes_, stream);
}

}  // namespace detllm::kernels::cuda
