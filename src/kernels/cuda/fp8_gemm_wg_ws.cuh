// The FP8 wgmma GEMM fed by the TMA unit with warp-specialised roles (the prefill schedule of
// launch_fp8_gemm_wg_split, variant 4): the same instructions on the same values as
// fp8_gemm_wg_split.cuh's kRunsInOrder schedule, so the same bits, with the data moved another
// way.
//
// The bits. Element (r, c) is made as in fp8_gemm_wg.cuh and fp8_gemm_wg_split.cuh: for each
// 128-k tile the same four m64n128k32 wgmmas on row r's and column c's codes, from zero; the
// tile's partial sum added in fp32 to its run's chain in ascending k; the runs' chains added in
// ascending order; the same epilogue (· x_scale · w_scale + bias). Only who loads the tiles,
// when, and which CTA makes which tile change — none of them an operation on the element's
// values. Shared memory holds the same bytes as the cp.async ring (TMA's 128-byte swizzle is
// the layout wgmma_desc_sw128 reads: 16-byte chunk c of row r at chunk c ^ (r % 8), rows of
// 128 bytes), and TMA fills rows past m or n and columns past k with zeros, as the cp.async
// copies' zero fill does.
//
// The schedule. 384 threads: warpgroup 0 the producer (one thread issues the TMA loads of each
// k tile — the CTA's 128 activation rows and 128 weight rows, 16 KB each — into a ring of
// kStages slots, each slot's arrival counted on its `full` mbarrier), warpgroups 1 and 2 the
// consumers (64 rows each, as the 128-row cp.async tile's two warpgroups). A consumer waits for
// its slot's `full` barrier, issues the tile's wgmmas, waits for them, releases the slot on its
// `empty` barrier (one arrival per consumer warp), then promotes. No __syncthreads in the
// loop: the two consumers and the producer drift apart, so one warpgroup's promotion overlaps
// the other's wgmmas, and the loads run ahead by the ring's depth across run boundaries (the
// cp.async schedule drains and refills its ring at each run). The producer gives its registers
// to the consumers (setmaxnreg): each consumer thread holds the tile's partial sum, its run's
// chain and, with more than one run, the runs' total (3 × 64 fp32).
//
// The grid. One CTA a 128 × 128 output tile, tiles numbered so that a wave covers a few row
// tiles and many column tiles (groups of kRasterRows row tiles, column-major inside a group):
// the activations and weights a wave reads stay in L2. A function of the tile only: no bit.
//
// Needs: k % 16 == 0 and 16-byte aligned codes (TMA's global strides and addresses), as every
// FP8 GEMM here (fp8_gemm_shape_supported).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm_wg.cuh"
#include "kernels/cuda/fp8_gemm_wg_split.cuh"

namespace detllm::kernels::cuda::fp8 {

namespace ws {

inline constexpr int kBM = 128, kBN = 128, kBK = kFp8WgPromoteK;
inline constexpr int kStages = 6;
inline constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
inline constexpr int kTileBytes = kBM * kBK;  // one operand's k tile: 128 rows of 128 bytes
inline constexpr int kStageBytes = 2 * kTileBytes;
inline constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + the 1024 alignment slack
inline constexpr int kRasterRows = 8;  // row tiles a raster group spans
inline constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(kBM == 2 * 64 && kBN == 128, "two 64-row consumers, the n128 wgmma");
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "the register file");

// Row tile and column tile of CTA `i` of tiles_m × tiles_n: groups of kRasterRows row tiles
// (the last group shorter), column-major inside a group.
__host__ __device__ inline void raster(int i, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = kRasterRows * tiles_n;
  const int group = i / per_group, first = group * kRasterRows;
  const int rows = min(kRasterRows, tiles_m - first);
  const int in = i - group * per_group;
  tm = first + in % rows;
  tn = in / rows;
}

__device__ __forceinline__ void tma_load_2d(void* smem, const CUtensorMap* map, int32_t c0,
                                            int32_t c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(ptx::smem_u32(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(ptx::smem_u32(bar))
      : "memory");
}

__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

__device__ __forceinline__ void zero(float (&a)[16][4]) {
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) a[j][e] = 0.0f;
}

}  // namespace ws

// x_map: the activation codes (m rows of k bytes), w_map: the weight codes (n rows), both with
// 128 × 128-byte boxes and the 128-byte swizzle (make_fp8_ws_maps). RUNS: more than one run
// (s.runs > 1 keeps the runs' total apart from the run's chain); s.runs == 1 otherwise.
template <bool RUNS>
__global__ void __launch_bounds__(ws::kThreads, 1)
    gemm_wg_ws_kernel(const __grid_constant__ CUtensorMap x_map,
                      const __grid_constant__ CUtensorMap w_map, const GemmParams p,
                      const WgSplitParams s) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[ws::kStages], empty[ws::kStages];
  const WgRing r = wg_ring(smem_raw);
  const int tiles_m = (p.m + ws::kBM - 1) / ws::kBM, tiles_n = (p.n + ws::kBN - 1) / ws::kBN;
  int tm, tn;
  ws::raster(static_cast<int>(blockIdx.x), tiles_m, tiles_n, tm, tn);
  const int m0 = tm * ws::kBM, n0 = tn * ws::kBN;
  const int tiles = (p.k + ws::kBK - 1) / ws::kBK;
  const int role = threadIdx.x >> 7;  // 0 producer, 1 and 2 consumers

  if (threadIdx.x == 0) {
    ws::prefetch_map(&x_map);
    ws::prefetch_map(&w_map);
    for (int i = 0; i < ws::kStages; ++i) {
      ptx::mbarrier_init(&full[i], 1);    // the producer's arrive.expect_tx
      ptx::mbarrier_init(&empty[i], 8);   // one arrival per consumer warp
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();

  if (role == 0) {
    ws::setmaxnreg_dec<ws::kProducerRegs>();
    if (threadIdx.x == 0) {
      for (int t = 0; t < tiles; ++t) {
        const int slot = t % ws::kStages;
        if (t >= ws::kStages) ptx::mbarrier_wait(&empty[slot], ((t / ws::kStages) - 1) & 1);
        unsigned char* stage = r.ptr + slot * ws::kStageBytes;
        ptx::mbarrier_arrive_expect_tx(&full[slot], ws::kStageBytes);
        ws::tma_load_2d(stage, &x_map, t * ws::kBK, m0, &full[slot]);
        ws::tma_load_2d(stage + ws::kTileBytes, &w_map, t * ws::kBK, n0, &full[slot]);
      }
    }
    return;
  }

  ws::setmaxnreg_inc<ws::kConsumerRegs>();
  const int wg = role - 1;  // the consumer's 64 rows: m0 + 64 wg …
  const int lane = threadIdx.x & 31;
  float acc[16][4], part[16][4], total[16][4];
  ws::zero(acc);
  if constexpr (RUNS) ws::zero(total);
  int z = 0, run_end = min(s.per, tiles);
  for (int t = 0; t < tiles; ++t) {
    const int slot = t % ws::kStages;
    ptx::mbarrier_wait(&full[slot], (t / ws::kStages) & 1);
    const uint32_t a = r.u32 + slot * ws::kStageBytes + wg * 64 * ws::kBK;
    const uint32_t b = r.u32 + slot * ws::kStageBytes + ws::kTileBytes;
    ptx::wgmma_fence_operands(part);
    ptx::wgmma_fence();
#pragma unroll
    for (int k32 = 0; k32 < ws::kBK / 32; ++k32)  // k32 step: 32 bytes further along the row
      ptx::wgmma_m64n128k32_e4m3(part, ptx::wgmma_desc_sw128(a + 32 * k32),
                                 ptx::wgmma_desc_sw128(b + 32 * k32), k32 > 0 ? 1u : 0u);
    ptx::wgmma_commit();
    ptx::wgmma_wait0();
    ptx::wgmma_fence_operands(part);
    if (lane == 0) ptx::mbarrier_arrive(&empty[slot]);  // this warp is done reading the slot
    wg_promote(acc, part);
    if constexpr (RUNS) {
      if (t + 1 == run_end) {  // run z's chain is complete: into the total, in ascending z
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            total[j][e] = z == 0 ? acc[j][e] : __fadd_rn(total[j][e], acc[j][e]);
        ws::zero(acc);
        ++z;
        run_end = min(run_end + s.per, tiles);
      }
    }
  }
  // wg_each_element reads the warp and lane from threadIdx.x % 128: the consumer's own.
  const float(&sum)[16][4] = RUNS ? total : acc;
  wg_each_element<WgCfg<128, 2>>(p, sum, m0, n0, wg, [&](int row, int col, float v) {
    p.y[static_cast<int64_t>(row) * p.n + col] = wg_epilogue(p, row, col, v);
  });
}

}  // namespace detllm::kernels::cuda::fp8
