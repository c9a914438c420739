// See fp8_test_kernels.h.
#include "cuda/fp8_test_kernels.h"

#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/fp8_gemm.cuh"

namespace detllm::kernels::cuda_testing {
namespace {

__global__ void codec_kernel(const float* x, int64_t n, uint8_t* codes, float* values) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) codes[i] = cuda::fp8::encode_e4m3(x[i]);
  if (i < 256) values[i] = cuda::fp8::decode_e4m3(static_cast<uint8_t>(i));
}

}  // namespace

cudaError_t fp8_codec_on_device(const float* x, int64_t n, uint8_t* codes, float* values) {
  const int64_t threads = n > 256 ? n : 256;
  codec_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256>>>(x, n, codes, values);
  const cudaError_t err = cudaGetLastError();
  return err != cudaSuccess ? err : cudaDeviceSynchronize();
}

cudaError_t launch_fp8_gemm_split_by_m(const uint8_t* xq, const float* x_scale, int32_t m,
                                       const uint8_t* w, const float* w_scale, int64_t n,
                                       int64_t k, float* y) {
  // Not one of the library's configurations (a kernel instantiated in both test_cuda and the
  // library would be registered twice): two stages; any tile gives the library's bits.
  using Tile = cuda::fp8::Cfg<64, 128, 128, 2, 4, 2>;
  const cuda::fp8::GemmParams p{xq, x_scale, w, w_scale, nullptr, y, m, static_cast<int32_t>(n),
                                static_cast<int32_t>(k)};
  const cudaError_t err =
      m > 64 ? cuda::fp8::run<Tile, true>(p, nullptr) : cuda::fp8::run<Tile, false>(p, nullptr);
  return err != cudaSuccess ? err : cudaDeviceSynchronize();
}

}  // namespace detllm::kernels::cuda_testing
