// The FP8 wgmma GEMM with its k range cut in a fixed number of runs (split-K whose split count
// is a function of the shape, never of m): the kernel templates behind
// launch_fp8_gemm_wg_split (fp8_gemm_wg_split.cu).
//
// The Σ. k's tiles of 128 (the promotion blocks of fp8_gemm_wg.cuh) are cut into S runs of
// `per` = ⌈tiles / S⌉ tiles (the last run may be shorter; S is reduced so that none is empty:
// wg_split_runs). Run z's chain c_z is fp8_gemm_wg.cuh's chain over its tiles alone: from
// zero, each tile's four wgmmas from zero, added in fp32 in ascending k. The element's sum is
// c_0, then + c_1, + c_2, … in ascending z (fp32 adds), then the epilogue of fp8_gemm.cuh:
// · x_scale[m] · w_scale[n] (+ bias[n]). With S = 1 that is fp8_gemm_wg.cuh's sum, bit for bit.
//
// Two schedules give those bits (tested at every m, tests/cuda/cuda_fp8_test.cpp
// CudaFp8WgSplit.*):
// - kRunsInCtas (small m: the grid needs CTAs): grid (n / 128, m tiles, S); CTA z makes c_z for
//   its tile and writes it, unscaled, to partial[z] (S × m × n fp32). S times the CTAs of the
//   whole kernel, each streaming 1/S of the weights: what batch-1 decode needs to read weights
//   at the memory's rate. The runs are then folded in ascending z and the epilogue applied
//   either by the tile's last CTA to finish (with `tiles`: it counts the finished runs of its
//   tile, atomically, and the one that brings the count to S folds all S chains from memory —
//   its own included — in the fixed order, so which CTA finishes last moves no bit; it leaves
//   the count at zero for the next launch) or by wg_split_combine_kernel, a second launch.
// - kRunsInOrder (large m: partials of S × m × n would cost more than the weights): one CTA a
//   tile makes c_0, c_1, … one after the other in registers and folds each as it ends.
//
// Programmatic dependent launch (pdl.cuh; the launcher's `pdl`, decode steps): both kernels
// call pdl_wait() before their first read of anything a kernel of the step wrote, so every bit
// is a plain launch's. Before it the GEMM may read only its weights: the first run's first
// STAGES − 1 weight tiles are put in flight into the ring (one cp.async group) while the kernel
// before it finishes, the activations of those tiles after the wait — the weights a batch-1
// decode step streams start before its input exists.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/fp8_gemm_wg.cuh"
#include "kernels/cuda/pdl.cuh"

namespace detllm::kernels::cuda::fp8 {

enum class WgSplitSchedule { kRunsInCtas, kRunsInOrder };

struct WgSplitParams {
  int32_t runs;      // S, none empty (wg_split_runs)
  int32_t per;       // tiles of 128 k a run: the last may have fewer
  float* partial;    // kRunsInCtas: (runs, m, n) fp32 chains, unscaled
  unsigned* tiles = nullptr;  // kRunsInCtas: a finished-run count per output tile (zeros), or
                              // nullptr for the combining launch
};

// Tiles of 128 k a run and the number of non-empty runs for `splits` asked (≥ 1).
__host__ __device__ inline WgSplitParams wg_split_runs(int32_t k, int32_t splits) {
  const int32_t tiles = (k + kFp8WgPromoteK - 1) / kFp8WgPromoteK;
  const int32_t s = splits < 1 ? 1 : (splits > tiles ? tiles : splits);
  const int32_t per = (tiles + s - 1) / s;
  return {(tiles + per - 1) / per, per, nullptr, nullptr};
}

// Run [t0, t1) of the k tiles into `acc` (zeroed here): the serial schedule of
// fp8_gemm_wg.cuh, promoting every tile. Ring slots by absolute tile (t % STAGES), so runs
// one after the other reuse the ring after a barrier. wait_first: the kernel's pdl_wait()
// (then pdl_release()) falls in this run's prologue — the weights of its first STAGES − 1
// tiles in one cp.async group before it, each tile's activations in a group of its own after
// it. The loop's wait<STAGES − 2> then finds tile t's two groups (the weights' and its own)
// complete exactly when it found its one group before: the extra group is the oldest.
template <class C>
__device__ __forceinline__ void wg_run_chain(const GemmParams& p, unsigned char* ring,
                                             uint32_t ring_u32, int m0, int n0, int wg, int t0,
                                             int t1, float (&acc)[16][4],
                                             bool wait_first = false) {
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
  float part[16][4];
  if (wait_first) {
#pragma unroll
    for (int s = 0; s < C::STAGES - 1; ++s) {
      const int t = t0 + s;
      if (t < t1)  // the weight rows
        wg_load_tile_rows<C>(p, ring + (t % C::STAGES) * C::STAGE_BYTES, t, m0, n0, C::BM,
                             C::BM + C::BN);
    }
    ptx::cp_async_commit();
    pdl_wait();
    pdl_release();
  }
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    const int t = t0 + s;
    if (t < t1) {
      // After the wait the activation rows alone where the weights are in flight already.
      wg_load_tile_rows<C>(p, ring + (t % C::STAGES) * C::STAGE_BYTES, t, m0, n0, 0,
                           wait_first ? C::BM : C::BM + C::BN);
    }
    ptx::cp_async_commit();
  }
  for (int t = t0; t < t1; ++t) {
    ptx::cp_async_wait<C::STAGES - 2>();
    ptx::fence_proxy_async_smem();
    __syncthreads();
    const int next = t + C::STAGES - 1;
    if (next < t1) wg_load_tile<C>(p, ring + (next % C::STAGES) * C::STAGE_BYTES, next, m0, n0);
    ptx::cp_async_commit();
    wg_issue_tile<C>(part, ring_u32, t, wg, true);
    ptx::wgmma_wait0();
    ptx::wgmma_fence_operands(part);
    wg_promote(acc, part);
  }
  ptx::cp_async_wait<0>();
  __syncthreads();  // every warpgroup is done reading the ring before the next run refills it
}

template <class C, WgSplitSchedule SCHEDULE>
__global__ void __launch_bounds__(C::kThreads)
    gemm_wg_split_kernel(const GemmParams p, const WgSplitParams s) {
  static_assert(!C::OVERLAP, "the runs use the serial schedule");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const WgRing r = wg_ring(smem_raw);
  unsigned char* ring = r.ptr;
  const uint32_t ring_u32 = r.u32;
  const int wg = threadIdx.x >> 7;
  const int m0 = blockIdx.y * C::BM, n0 = blockIdx.x * C::BN;
  const int tiles = (p.k + C::BK - 1) / C::BK;

  float acc[16][4];
  if constexpr (SCHEDULE == WgSplitSchedule::kRunsInCtas) {
    const int z = blockIdx.z;
    const int t0 = z * s.per, t1 = min(t0 + s.per, tiles);
    wg_run_chain<C>(p, ring, ring_u32, m0, n0, wg, t0, t1, acc, /*wait_first=*/true);
    if (s.tiles != nullptr && s.runs == 1) {  // one run: the fold is the chain itself
      wg_each_element<C>(p, acc, m0, n0, wg, [&](int row, int col, float v) {
        p.y[static_cast<int64_t>(row) * p.n + col] = wg_epilogue(p, row, col, v);
      });
      return;
    }
    const int64_t mn = static_cast<int64_t>(p.m) * p.n;
    float* out = s.partial + z * mn;
    wg_each_element<C>(p, acc, m0, n0, wg, [&](int row, int col, float v) {
      out[static_cast<int64_t>(row) * p.n + col] = v;
    });
    if (s.tiles == nullptr) return;  // wg_split_combine_kernel folds
    __shared__ bool last;
    __threadfence();  // this CTA's chain is visible to every CTA before it is counted
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned* count = s.tiles + blockIdx.y * gridDim.x + blockIdx.x;
      last = atomicAdd(count, 1u) == static_cast<unsigned>(s.runs - 1);
      if (last) *count = 0;  // every run of the tile has counted: zero for the next launch
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    wg_each_element<C>(p, acc, m0, n0, wg, [&](int row, int col, float) {
      const int64_t i = static_cast<int64_t>(row) * p.n + col;
      float sum = __ldcg(s.partial + i);  // L2: the other CTAs' chains, never a stale L1 line
      for (int r = 1; r < s.runs; ++r) sum = __fadd_rn(sum, __ldcg(s.partial + r * mn + i));
      p.y[i] = wg_epilogue(p, row, col, sum);
    });
  } else {
    float total[16][4];
    for (int z = 0; z < s.runs; ++z) {
      const int t0 = z * s.per, t1 = min(t0 + s.per, tiles);
      wg_run_chain<C>(p, ring, ring_u32, m0, n0, wg, t0, t1, acc, /*wait_first=*/z == 0);
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          total[j][e] = z == 0 ? acc[j][e] : __fadd_rn(total[j][e], acc[j][e]);
    }
    wg_each_element<C>(p, total, m0, n0, wg, [&](int row, int col, float v) {
      p.y[static_cast<int64_t>(row) * p.n + col] = wg_epilogue(p, row, col, v);
    });
  }
}

// kRunsInCtas' second kernel: y = epilogue(c_0 + c_1 + … in ascending z), one thread an
// element (grid-stride: the grid changes no bit).
__global__ void wg_split_combine_kernel(const GemmParams p, const WgSplitParams s) {
  pdl_wait();
  pdl_release();
  const int64_t mn = static_cast<int64_t>(p.m) * p.n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < mn;
       i += int64_t{gridDim.x} * blockDim.x) {
    float sum = s.partial[i];
    for (int z = 1; z < s.runs; ++z) sum = __fadd_rn(sum, s.partial[z * mn + i]);
    p.y[i] = wg_epilogue(p, static_cast<int>(i / p.n), static_cast<int>(i % p.n), sum);
  }
}

// pdl: both launches with the programmatic-dependent-launch attribute (pdl.cuh).
template <class C, WgSplitSchedule SCHEDULE>
cudaError_t run_wg_split(const GemmParams& p, const WgSplitParams& s, cudaStream_t stream,
                         bool pdl = false) {
  const bool ctas = SCHEDULE == WgSplitSchedule::kRunsInCtas;
  const dim3 grid((p.n + C::BN - 1) / C::BN, (p.m + C::BM - 1) / C::BM, ctas ? s.runs : 1);
  cudaError_t err =
      cudaFuncSetAttribute(gemm_wg_split_kernel<C, SCHEDULE>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
  if (err != cudaSuccess) return err;
  err = launch_pdl(pdl, gemm_wg_split_kernel<C, SCHEDULE>, grid, dim3(C::kThreads), C::SMEM_BYTES,
                   stream, p, s);
  if (err != cudaSuccess || !ctas || s.tiles != nullptr) return err;
  const int64_t mn = static_cast<int64_t>(p.m) * p.n;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((mn + 255) / 256, 4096));
  return launch_pdl(pdl, wg_split_combine_kernel, dim3(blocks), dim3(256), 0, stream, p, s);
}

}  // namespace detllm::kernels::cuda::fp8
