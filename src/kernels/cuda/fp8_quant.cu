// The FP8 GEMM's activation quantizer: each row x (k) of an (m, k) fp32 or bf16 matrix gets its
// own scale s = amax / 448 (amax = max |x[i]|, NaN elements ignored; s = 1 when that is 0) and
// codes q[i] = e4m3(x[i] / s) (one IEEE division, then the host codec's rounding, fp8_codec.cuh).
// Row-local: a row's scale and codes depend on that row alone, so quantizing is batch-invariant
// by construction (max is exact and order-free, so the block's reduction tree cannot move a bit
// either). With a matrix's activation parameters (fp8_launch.h: a static input scale, or a bound
// on the amax) the scale is the static one, or min(amax, bound) / 448: still the row's alone.
// Test: test_cuda --gtest_filter='CudaFp8.Quantize*' (= tests/cuda/fp8_reference.h, and
// kernels/ref/fp8_linear.h for the parameters).
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/fp8_launch.h"
#include "kernels/cuda/fp8_row_quant.cuh"
#include "kernels/cuda/pdl.cuh"

namespace detllm::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <bool BF16>
__device__ __forceinline__ float load(const void* x, int64_t i) {
  if constexpr (BF16) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
  } else {
    return static_cast<const float*>(x)[i];
  }
}

// params: nullptr, or {input_scale, act_bound} in device memory (kernels/fp8_device_matrix.h):
// fp8_row_quant.cuh's rule.
template <bool BF16>
__global__ void __launch_bounds__(kThreads)
    fp8_quantize_rows_kernel(const void* x, int64_t k, uint8_t* q, float* scale,
                             const float* params) {
  __shared__ float warp_max[kThreads / 32];
  pdl_wait();  // x is the previous kernel's output (pdl.cuh)
  pdl_release();
  const int64_t row = blockIdx.x;
  const int64_t base = row * k;
  const fp8::RowRule rule = fp8::row_rule(params);
  float amax = 0.0f;
  if (!rule.is_static())
    for (int64_t i = threadIdx.x; i < k; i += kThreads)
      amax = fmaxf(amax, fabsf(load<BF16>(x, base + i)));
  const float s = fp8::block_row_scale<kThreads / 32>(rule, amax, warp_max);
  if (threadIdx.x == 0) scale[row] = s;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) q[base + i] = fp8::row_code(load<BF16>(x, base + i), s);
}

// One 128-column group of one row a block (grid: m × ⌈k / 128⌉), one element a thread: the
// rule of fp8_quantize_rows_kernel over the group alone.
template <bool BF16>
__global__ void __launch_bounds__(fp8::kE4m3GroupCols)
    fp8_quantize_groups_kernel(const void* x, int64_t k, uint8_t* q, float* scale,
                               const float* params) {
  constexpr int G = fp8::kE4m3GroupCols;
  const int64_t row = blockIdx.x, group = blockIdx.y, groups = gridDim.y;
  const int64_t i = group * G + threadIdx.x;
  const bool in = i < k;
  const float v = in ? load<BF16>(x, row * k + i) : 0.0f;
  __shared__ float warp_max[G / 32];
  const fp8::RowRule rule = fp8::row_rule(params);
  const float amax = fabsf(v) == fabsf(v) ? fabsf(v) : 0.0f;  // NaN ignored, as fmaxf does
  const float s = fp8::block_row_scale<G / 32>(rule, amax, warp_max);
  if (threadIdx.x == 0) scale[row * groups + group] = s;
  if (in) q[row * k + i] = fp8::row_code(v, s);
}

}  // namespace

cudaError_t launch_fp8_quantize_groups_params(const void* x, bool x_bf16, int32_t m, int64_t k,
                                              const float* params, uint8_t* q, float* scale,
                                              cudaStream_t stream) {
  if (m < 0 || k < 0) return cudaErrorInvalidValue;
  if (m == 0 || k == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(m),
                  static_cast<unsigned>((k + fp8::kE4m3GroupCols - 1) / fp8::kE4m3GroupCols));
  if (x_bf16)
    fp8_quantize_groups_kernel<true><<<grid, fp8::kE4m3GroupCols, 0, stream>>>(x, k, q, scale, params);
  else
    fp8_quantize_groups_kernel<false><<<grid, fp8::kE4m3GroupCols, 0, stream>>>(x, k, q, scale, params);
  return cudaGetLastError();
}

cudaError_t launch_fp8_quantize_rows(const void* x, bool x_bf16, int32_t m, int64_t k, uint8_t* q,
                                     float* scale, cudaStream_t stream) {
  if (m < 0 || k < 0) return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;  // (k = 0: every row's scale is 1, no codes)
  return launch_fp8_quantize_rows_params(x, x_bf16, m, k, nullptr, q, scale, stream);
}

cudaError_t launch_fp8_quantize_rows_params(const void* x, bool x_bf16, int32_t m, int64_t k,
                                            const float* params, uint8_t* q, float* scale,
                                            cudaStream_t stream, bool pdl) {
  if (m < 0 || k < 0) return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(m);
  return x_bf16 ? launch_pdl(pdl, fp8_quantize_rows_kernel<true>, dim3(grid), dim3(kThreads), 0,
                             stream, x, k, q, scale, params)
                : launch_pdl(pdl, fp8_quantize_rows_kernel<false>, dim3(grid), dim3(kThreads), 0,
                             stream, x, k, q, scale, params);
}

}  // namespace detllm::kernels::cuda
