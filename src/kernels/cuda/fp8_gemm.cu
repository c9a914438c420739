// The batch-invariant FP8 GEMM (E4M3 weights with a scale per output channel, E4M3 activations
// with a scale per row from fp8_quant.cu): the tile configurations and the plan by m. The
// kernel and why its bits do not depend on m are in fp8_gemm.cuh.
// Test: test_cuda --gtest_filter='CudaFp8*'; bench: build-cuda/benchmarks/cuda_fp8_bench.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_gemm.cuh"

namespace detllm::kernels::cuda {
namespace {

using fp8::Cfg;
//                 BM   BN   BK WM WN ST
using Small0 = Cfg<16, 32, 256, 1, 2, 4>;  // 2 warps: twice the blocks of Small1 at small m
using Small1 = Cfg<16, 64, 128, 1, 4, 4>;
using Mid0 = Cfg<64, 128, 128, 2, 4, 3>;
using Mid1 = Cfg<32, 128, 128, 1, 4, 4>;
using Large0 = Cfg<128, 128, 128, 2, 4, 3>;
using Large1 = Cfg<128, 64, 128, 2, 2, 4>;

// Speed only (every configuration gives the same bits): the size class of m. Not yet tuned on
// a GPU; benchmarks/cuda_fp8_bench times every variant.
int default_variant(int32_t m) {
  if (m <= 16) return 0;
  if (m <= 256) return m <= 64 ? 3 : 2;
  return 4;
}

}  // namespace

bool fp8_gemm_shape_supported(int64_t n, int64_t k) {
  return n > 0 && k > 0 && k % 16 == 0 && n <= INT32_MAX && k <= INT32_MAX;
}

cudaError_t launch_fp8_gemm(const uint8_t* xq, const float* x_scale, int32_t m, const uint8_t* w,
                            const float* w_scale, int64_t n, int64_t k, const float* bias,
                            float* y, int variant, cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  if (m < 0 || !fp8_gemm_shape_supported(n, k) || variant >= kFp8GemmVariants)
    return cudaErrorInvalidValue;
  const fp8::GemmParams p{xq, x_scale, w, w_scale, bias, y, m, static_cast<int32_t>(n),
                          static_cast<int32_t>(k)};
  switch (variant < 0 ? default_variant(m) : variant) {
    case 0: return fp8::run<Small0, false>(p, stream);
    case 1: return fp8::run<Small1, false>(p, stream);
    case 2: return fp8::run<Mid0, false>(p, stream);
    case 3: return fp8::run<Mid1, false>(p, stream);
    case 4: return fp8::run<Large0, false>(p, stream);
    default: return fp8::run<Large1, false>(p, stream);
  }
}

cudaError_t launch_fp8_linear(const void* x, bool x_bf16, int32_t m, const uint8_t* w,
                              const float* w_scale, int64_t n, int64_t k, const float* bias,
                              float* y, uint8_t* xq, float* x_scale, int variant,
                              cudaStream_t stream) {
  return fp8::quantize_then(x, x_bf16, m, w, w_scale, n, k, bias, y, xq, x_scale, variant, stream,
                            launch_fp8_gemm);
}

}  // namespace detllm::kernels::cuda
