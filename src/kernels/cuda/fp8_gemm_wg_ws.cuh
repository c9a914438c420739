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
// `empty` barrier (one arrival per consumer warp), then promotes; with one run, tile t + 1's
// wgmmas are issued before tile t's are waited for (two partial sums in turn). No
// __syncthreads in the loop: the two consumers and the producer drift apart, so one
// warpgroup's promotion overlaps the other's wgmmas, and the loads run ahead by the ring's
// depth across run boundaries (the cp.async schedule drains and refills its ring at each run).
// The producer gives its registers to the consumers (setmaxnreg): each consumer thread holds
// 3 × 64 fp32 — the run's chain and two partial sums, or, with several runs, the chain, one
// partial sum and the runs' total.
//
// The grid. One CTA a 128 × 128 output tile, tiles numbered so that a wave covers a few row
// tiles and many column tiles (fp8_gemm_wg_ws_raster.h): the activations and weights a wave
// reads stay in L2. A function of the tile only: no bit.
//
// Needs: k % 16 == 0 and 16-byte aligned codes (TMA's global strides and addresses), as every
// FP8 GEMM here (fp8_gemm_shape_supported).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fp8_gemm_wg.cuh"
#include "kernels/cuda/fp8_gemm_wg_split.cuh"
#include "kernels/cuda/fp8_gemm_wg_ws_raster.h"

namespace detllm::kernels::cuda::fp8 {

namespace ws {

inline constexpr int kBM = 128, kBN = 128, kBK = kFp8WgPromoteK;
inline constexpr int kStages = 6;
inline constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
inline constexpr int kTileBytes = kBM * kBK;  // one operand's k tile: 128 rows of 128 bytes
inline constexpr int kStageBytes = 2 * kTileBytes;
inline constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + the 1024 alignment slack
inline constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(kBM == 2 * 64 && kBN == 128, "two 64-row consumers, the n128 wgmma");
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "the register file");

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

// The consumer's view of the ring: its slots, barriers and rows.
struct WsRing {
  uint32_t u32;  // the ring's shared address (1024-aligned)
  uint64_t* full;
  uint64_t* empty;
  int wg;        // the consumer: rows m0 + 64 wg …
  int lane;
};

// Tile t's four wgmmas into `part`, from zero, once its slot has landed; committed as one
// group, not waited for.
__device__ __forceinline__ void ws_issue(const WsRing& q, float (&part)[16][4], int t) {
  const int slot = t % ws::kStages;
  ptx::mbarrier_wait(&q.full[slot], (t / ws::kStages) & 1);
  const uint32_t a = q.u32 + slot * ws::kStageBytes + q.wg * 64 * ws::kBK;
  const uint32_t b = q.u32 + slot * ws::kStageBytes + ws::kTileBytes;
  ptx::wgmma_fence_operands(part);
  ptx::wgmma_fence();
#pragma unroll
  for (int k32 = 0; k32 < ws::kBK / 32; ++k32)  // k32 step: 32 bytes further along the row
    ptx::wgmma_m64n128k32_e4m3(part, ptx::wgmma_desc_sw128(a + 32 * k32),
                               ptx::wgmma_desc_sw128(b + 32 * k32), k32 > 0 ? 1u : 0u);
  ptx::wgmma_commit();
}

// Tile t's group complete (OLDER: the groups issued after it may still run), its slot released
// (one arrival per warp), its partial sum added to the chain.
template <int NEWER>
__device__ __forceinline__ void ws_finish(const WsRing& q, float (&acc)[16][4],
                                          float (&part)[16][4], int t) {
  wgmma_wait<NEWER>();
  ptx::wgmma_fence_operands(part);
  if (q.lane == 0) ptx::mbarrier_arrive(&q.empty[t % ws::kStages]);
  wg_promote(acc, part);
}

// One run (S = 1): tile t + 1's wgmmas issued before tile t's are waited for and promoted, into
// two partial sums in turn — the same adds in the same order, so the same bits (ptxas keeps the
// wgmmas asynchronous here: the two partial sums are distinct registers).
__device__ __forceinline__ void ws_consume_one_run(const WsRing& q, int tiles,
                                                   float (&acc)[16][4]) {
  float pa[16][4], pb[16][4];
  ws::zero(acc);
  ws_issue(q, pa, 0);
  int t = 0;
  for (; t + 2 < tiles; t += 2) {
    ws_issue(q, pb, t + 1);
    ws_finish<1>(q, acc, pa, t);
    ws_issue(q, pa, t + 2);
    ws_finish<1>(q, acc, pb, t + 1);
  }
  if (t + 1 < tiles) {
    ws_issue(q, pb, t + 1);
    ws_finish<1>(q, acc, pa, t);
    ws_finish<0>(q, acc, pb, t + 1);
  } else {
    ws_finish<0>(q, acc, pa, t);
  }
}

// Several runs: each tile waited for and promoted before the next is issued (a second partial
// sum would not fit beside the run's chain and the runs' total), each run's chain added to the
// total in ascending order as it ends.
__device__ __forceinline__ void ws_consume_runs(const WsRing& q, int tiles, int per,
                                                float (&total)[16][4]) {
  float acc[16][4], part[16][4];
  ws::zero(acc);
  ws::zero(total);
  int run_end = min(per, tiles);
  for (int t = 0; t < tiles; ++t) {
    ws_issue(q, part, t);
    ws_finish<0>(q, acc, part, t);
    // Run z's chain complete: into the total, in ascending z. The total starts at +0, and
    // +0 + c_0 is c_0's bits (a chain starts at +0 and adds in round-to-nearest, so it is never
    // -0: only -0 + -0 gives -0), as kRunsInOrder's first assignment.
    if (t + 1 == run_end) {
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) total[j][e] = __fadd_rn(total[j][e], acc[j][e]);
      ws::zero(acc);
      run_end = min(run_end + per, tiles);
    }
  }
}

// x_map: the activation codes (m rows of k bytes), w_map: the weight codes (n rows), both with
// 128 × 128-byte boxes and the 128-byte swizzle (fp8_gemm_wg_split.cu fp8_codes_map). RUNS:
// s.runs > 1; s.runs == 1 otherwise.
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
      ptx::mbarrier_init(&full[i], 1);   // the producer's arrive.expect_tx
      ptx::mbarrier_init(&empty[i], 8);  // one arrival per consumer warp
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
  const WsRing q{r.u32, full, empty, role - 1, static_cast<int>(threadIdx.x & 31)};
  float sum[16][4];
  if constexpr (RUNS) {
    ws_consume_runs(q, tiles, s.per, sum);
  } else {
    ws_consume_one_run(q, tiles, sum);
  }
  // wg_each_element reads the warp and lane from threadIdx.x % 128: the consumer's own.
  wg_each_element<WgCfg<128, 2>>(p, sum, m0, n0, q.wg, [&](int row, int col, float v) {
    p.y[static_cast<int64_t>(row) * p.n + col] = wg_epilogue(p, row, col, v);
  });
}

}  // namespace detllm::kernels::cuda::fp8
