// The FP8 wgmma GEMM with a fixed k split (fp8_gemm_wg_split.cuh): its schedules and tiles.
// Test: test_cuda --gtest_filter='CudaFp8WgSplit*'; bench: cuda_fp8_bench --wg-splits LIST.
#include <algorithm>

#include <cudaTypedefs.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_gemm_wg_split.cuh"
#include "kernels/cuda/fp8_gemm_wg_ws.cuh"
#include "kernels/cuda/fp8_launch.h"

namespace detllm::kernels::cuda {
namespace {

using fp8::WgCfg;
using fp8::WgSplitSchedule;
using Wg64 = WgCfg<64, 6>;
using Wg128 = WgCfg<128, 4>;

// The driver's cuTensorMapEncodeTiled, found once through the runtime (no libcuda link).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// rows × k E4M3 codes (rows of k bytes) as 128 × 128-byte boxes with the 128-byte swizzle, rows
// and columns past the matrix read as zeros (fp8_gemm_wg_ws.cuh).
bool fp8_codes_map(CUtensorMap* map, const uint8_t* codes, int64_t rows, int64_t k) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k)};
  const cuuint32_t box[2] = {fp8::ws::kBK, fp8::ws::kBM};
  const cuuint32_t steps[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(codes), dims, strides,
                box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

cudaError_t run_wg_ws(const fp8::GemmParams& p, const fp8::WgSplitParams& s,
                      cudaStream_t stream) {
  CUtensorMap x_map, w_map;
  if (!fp8_codes_map(&x_map, p.x, p.m, p.k) || !fp8_codes_map(&w_map, p.w, p.n, p.k))
    return cudaErrorInvalidValue;
  const int tiles = ((p.m + fp8::ws::kBM - 1) / fp8::ws::kBM) * ((p.n + fp8::ws::kBN - 1) / fp8::ws::kBN);
  const auto kernel = s.runs > 1 ? fp8::gemm_wg_ws_kernel<true> : fp8::gemm_wg_ws_kernel<false>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         fp8::ws::kSmemBytes);
  if (err != cudaSuccess) return err;
  kernel<<<tiles, fp8::ws::kThreads, fp8::ws::kSmemBytes, stream>>>(x_map, w_map, p, s);
  return cudaGetLastError();
}

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
                                     unsigned* tile_counts, bool pdl) {
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
  // Measured (H100, cuda_fp8_bench --wg-splits): at m ≤ 64 the combining launch (3) beats the
  // in-kernel fold (0) — 13–28 µs against 33–52 at m = 1 on o, qkv and down — and above 64
  // rows the TMA-fed kernel (4) the cp.async tiles (2), 1.66–1.81× at m = 4096. One run needs
  // no fold: variant 0 then writes the chain's epilogue directly (no counts, no second launch).
  if (variant < 0) {
    variant = small && fits ? (s.runs == 1 && tile_counts != nullptr ? 0 : 3) : (small ? 1 : 4);
  }
  switch (variant) {
    case 0:
      if (!fits || tile_counts == nullptr) return cudaErrorInvalidValue;
      s.tiles = tile_counts;
      return fp8::run_wg_split<Wg64, WgSplitSchedule::kRunsInCtas>(p, s, stream, pdl);
    case 1: return fp8::run_wg_split<Wg64, WgSplitSchedule::kRunsInOrder>(p, s, stream, pdl);
    case 2: return fp8::run_wg_split<Wg128, WgSplitSchedule::kRunsInOrder>(p, s, stream, pdl);
    case 4: return run_wg_ws(p, s, stream);
    default:
      if (!fits) return cudaErrorInvalidValue;
      return fp8::run_wg_split<Wg64, WgSplitSchedule::kRunsInCtas>(p, s, stream, pdl);
  }
}

}  // namespace detllm::kernels::cuda
