// The FP8 wgmma GEMM with a fixed k split (fp8_gemm_wg_split.cuh): its schedules and tiles.
// Test: test_cuda --gtest_filter='CudaFp8WgSplit*'; bench: cuda_fp8_bench --wg-splits LIST.
#include <algorithm>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_gemm_wg_split.cuh"
#include "kernels/cuda/fp8_launch.h"

namespace detllm::kernels::cuda {
namespace {

using fp8::WgCfg;
using fp8::WgSplitSchedule;
using Wg64 = WgCfg<64, 6>;
using Wg128 = WgCfg<128, 4>;

}  // namespace

int32_t fp8_gemm_wg_split_runs(int64_t k, int splits) {
  return fp8::wg_split_runs(static_cast<int32_t>(k), splits).runs;
}

int fp8_gemm_wg_auto_splits(int64_t n, int64_t /*k*/, int sms) {
  const int64_t blocks = (n + 127) / 128;
  if (sms <= 0 || blocks >= sms) return 1;
  return static_cast<int>(std::min<int64_t>(kFp8GemmWgSplitAutoMax, sms / blocks));
}

size_t fp8_gemm_wg_split_tiles(int32_t m, int64_t n) {
  return static_cast<size_t>((n + 127) / 128) * static_cast<size_t>((m + 63) / 64);
}

size_t fp8_gemm_wg_split_workspace(int32_t m, int64_t n, int64_t k, int splits) {
  return static_cast<size_t>(fp8_gemm_wg_split_runs(k, splits)) * static_cast<size_t>(m) *
         static_cast<size_t>(n);
}

cudaError_t launch_fp8_gemm_wg_split(const uint8_t* xq, const float* x_scale, int32_t m,
                                     const uint8_t* w, const float* w_scale, int64_t n, int64_t k,
                                     const float* bias, float* y, int splits, float* workspace,
                                     size_t workspace_floats, int variant, cudaStream_t stream,
                                     unsigned* tile_counts) {
  if (m == 0) return cudaSuccess;
  if (m < 0 || splits < 1 || !fp8_gemm_shape_supported(n, k) || variant >= kFp8GemmWgSplitVariants)
    return cudaErrorInvalidValue;
  const fp8::GemmParams p{xq, x_scale, w, w_scale, bias, y, m, static_cast<int32_t>(n),
                          static_cast<int32_t>(k)};
  fp8::WgSplitParams s = fp8::wg_split_runs(static_cast<int32_t>(k), splits);
  s.partial = workspace;
  const bool fits = workspace != nullptr &&
                    workspace_floats >= fp8_gemm_wg_split_workspace(m, n, k, splits);
  const bool small = m <= kFp8GemmWgSplitCtaMaxM;
  if (variant < 0) variant = small && fits ? (tile_counts ? 0 : 3) : (small ? 1 : 2);
  switch (variant) {
    case 0:
      if (!fits || tile_counts == nullptr) return cudaErrorInvalidValue;
      s.tiles = tile_counts;
      return fp8::run_wg_split<Wg64, WgSplitSchedule::kRunsInCtas>(p, s, stream);
    case 1: return fp8::run_wg_split<Wg64, WgSplitSchedule::kRunsInOrder>(p, s, stream);
    case 2: return fp8::run_wg_split<Wg128, WgSplitSchedule::kRunsInOrder>(p, s, stream);
    default:
      if (!fits) return cudaErrorInvalidValue;
      return fp8::run_wg_split<Wg64, WgSplitSchedule::kRunsInCtas>(p, s, stream);
  }
}

}  // namespace detllm::kernels::cuda
