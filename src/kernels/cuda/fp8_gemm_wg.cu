// The FP8 GEMM on FP8 warpgroup MMAs (the prefill kernel): its tile configurations and the
// plan by m. The kernel, its numerics and why its bits do not depend on m: fp8_gemm_wg.cuh.
// Test: test_cuda --gtest_filter='CudaFp8Wg*'; bench: build-cuda/benchmarks/cuda_fp8_bench.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_gemm_wg.cuh"
#include "kernels/cuda/fp8_launch.h"

namespace detllm::kernels::cuda {
namespace {

using fp8::WgCfg;
//                  BM  STAGES OVERLAP
using Wg64 = WgCfg<64, 6>;            // one consumer warpgroup: twice the blocks at small m
using Wg128 = WgCfg<128, 4>;          // two warpgroups share each B tile
using Wg128o = WgCfg<128, 5, true>;   // the same, a tile's MMAs overlapping the last promotion
using Wg64o = WgCfg<64, 6, true>;

// Speed only (every configuration gives the same bits).
int default_variant(int32_t m) { return m <= 64 ? 0 : 1; }

}  // namespace

cudaError_t launch_fp8_gemm_wg(const uint8_t* xq, const float* x_scale, int32_t m,
                               const uint8_t* w, const float* w_scale, int64_t n, int64_t k,
                               const float* bias, float* y, int variant, cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  if (m < 0 || !fp8_gemm_shape_supported(n, k) || variant >= kFp8GemmWgVariants)
    return cudaErrorInvalidValue;
  const fp8::GemmParams p{xq, x_scale, w, w_scale, bias, y, m, static_cast<int32_t>(n),
                          static_cast<int32_t>(k)};
  switch (variant < 0 ? default_variant(m) : variant) {
    case 0: return fp8::run_wg<Wg64, 1>(p, stream);
    case 1: return fp8::run_wg<Wg128, 1>(p, stream);
    case 2: return fp8::run_wg<Wg128o, 1>(p, stream);
    default: return fp8::run_wg<Wg64o, 1>(p, stream);
  }
}

cudaError_t launch_fp8_gemm_wg_blocks(const uint8_t* xq, const float* x_scale, int32_t m,
                                      const uint8_t* w, const float* w_scale, int64_t n,
                                      int64_t k, bool group_activations, const float* bias,
                                      float* y, int variant, cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  if (m < 0 || !fp8_gemm_shape_supported(n, k) || variant >= kFp8GemmWgBlockVariants)
    return cudaErrorInvalidValue;
  fp8::GemmParams p{xq, x_scale, w, w_scale, bias, y, m, static_cast<int32_t>(n),
                    static_cast<int32_t>(k)};
  p.scale_blocks = static_cast<int32_t>((k + fp8::kFp8WgPromoteK - 1) / fp8::kFp8WgPromoteK);
  using fp8::WgScales;
  const bool wide = (variant < 0 ? default_variant(m) : variant) == 1;
  if (group_activations) {
    return wide ? fp8::run_wg<Wg128, 1, WgScales::kBlockGroup>(p, stream)
                : fp8::run_wg<Wg64, 1, WgScales::kBlockGroup>(p, stream);
  }
  return wide ? fp8::run_wg<Wg128, 1, WgScales::kBlock>(p, stream)
              : fp8::run_wg<Wg64, 1, WgScales::kBlock>(p, stream);
}

cudaError_t launch_fp8_linear_wg(const void* x, bool x_bf16, int32_t m, const uint8_t* w,
                                 const float* w_scale, int64_t n, int64_t k, const float* bias,
                                 float* y, uint8_t* xq, float* x_scale, int variant,
                                 cudaStream_t stream) {
  return fp8::quantize_then(x, x_bf16, m, w, w_scale, n, k, bias, y, xq, x_scale, variant, stream,
                            launch_fp8_gemm_wg);
}

}  // namespace detllm::kernels::cuda
