// launch_fp8_scale_outer (fp8_launch.h): the per-row and per-column scales of an FP8 product
// computed unscaled. One thread an element, grid-stride (the grid changes no bit).
#include <algorithm>

#include "kernels/cuda/fp8_launch.h"

namespace detllm::kernels::cuda {
namespace {

__global__ void scale_outer_kernel(float* y, const float* x_scale, const float* w_scale,
                                   int32_t m, int64_t n) {
  const int64_t total = int64_t{m} * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = __fmul_rn(__fmul_rn(y[i], x_scale[i / n]), w_scale[i % n]);
  }
}

}  // namespace

cudaError_t launch_fp8_scale_outer(float* y, const float* x_scale, const float* w_scale,
                                   int32_t m, int64_t n, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  if (m < 0 || n < 0) return cudaErrorInvalidValue;
  const int64_t total = int64_t{m} * n;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4096));
  scale_outer_kernel<<<blocks, 256, 0, stream>>>(y, x_scale, w_scale, m, n);
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda
