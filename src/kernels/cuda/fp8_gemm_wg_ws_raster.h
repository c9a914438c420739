// The tile order of the TMA-fed FP8 GEMM (fp8_gemm_wg_ws.cuh): which output tile CTA i makes.
// Host and device code (the host tests check it is a bijection; it decides no bit, only which
// tiles a wave of CTAs shares in L2).
#pragma once

#if defined(__CUDACC__)
#define DETLLM_WS_HD __host__ __device__
#else
#define DETLLM_WS_HD
#endif

namespace detllm::kernels::cuda::fp8::ws {

inline constexpr int kRasterRows = 8;  // row tiles a raster group spans

// Row tile and column tile of CTA `i` of tiles_m × tiles_n: groups of kRasterRows row tiles
// (the last group shorter), column-major inside a group — a wave of CTAs covers a few row tiles
// and many column tiles, so the activations and weights it reads stay in L2.
DETLLM_WS_HD inline void raster(int i, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = kRasterRows * tiles_n;
  const int group = i / per_group, first = group * kRasterRows;
  const int left = tiles_m - first;
  const int rows = left < kRasterRows ? left : kRasterRows;
  const int in = i - group * per_group;
  tm = first + in % rows;
  tn = in / rows;
}

}  // namespace detllm::kernels::cuda::fp8::ws

#undef DETLLM_WS_HD
