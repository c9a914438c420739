// The experts' grouping and grouped GEMM with device-side offsets (kernels/ops.h moe_group,
// matmul_grouped_device; docs/cuda.md "Mixture of experts"):
//
// - moe_group: one block; thread e counts expert e's (token, rank) pairs, thread 0 scans the
//   counts into offsets, and thread e writes its pairs' grouped rows in ascending pair order —
//   the host counting sort's result (integers: no rounding anywhere).
// - grouped GEMM: one launch for every group. The grid's y runs over 16-row tiles of the groups
//   (an upper bound, nk / 16 + n_groups, so no count comes back to the host; idle tiles exit),
//   its x over 64-column tiles of the output (4 warps × 16 columns). Each output element is
//   one chain of mma.sync.m16n8k16 steps in ascending k from zero in fp32 — the sequence the
//   invariant GEMM (gemm.cu, S = 1) and the verified cuBLASLt plans compute for every m — so a
//   row's bits are those it has alone through matmul_rounded, whatever its group's size or its
//   tile (tests/cuda/cuda_moe_test.cpp checks exactly that). Operands come straight from global
//   memory in the MMA's fragment layout (4 bytes a load; each W row's 32 bytes of a k-step are
//   one sector across the warp); rows past a group's end read zeros and are not stored.
// Test: build-cuda/tests/test_cuda --gtest_filter='CudaMoe*'.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/mma_ptx.cuh"

namespace detllm::kernels::cuda {
namespace {

constexpr int kChunk = 4096;  // pairs staged in shared memory at a time
constexpr int kTileRows = 16;
constexpr int kWarps = 4;
constexpr int kWarpCols = 16;  // two n8 fragments a warp
constexpr int kCtaCols = kWarps * kWarpCols;

__global__ void moe_group_kernel(const int32_t* experts, int32_t nk, int32_t k,
                                 int32_t n_experts, int32_t* offsets, int32_t* src_row,
                                 int32_t* rows) {
  __shared__ int32_t chunk[kChunk];
  __shared__ int32_t first[kMaxRouteExperts + 1];
  const int e = static_cast<int>(threadIdx.x);
  int32_t count = 0;
  for (int32_t c0 = 0; c0 < nk; c0 += kChunk) {
    const int32_t len = min(kChunk, nk - c0);
    for (int32_t i = e; i < len; i += blockDim.x) chunk[i] = experts[c0 + i];
    __syncthreads();
    if (e < n_experts)
      for (int32_t i = 0; i < len; ++i) count += chunk[i] == e ? 1 : 0;
    __syncthreads();
  }
  if (e < n_experts) first[e + 1] = count;
  __syncthreads();
  if (e == 0) {
    first[0] = 0;
    for (int32_t g = 0; g < n_experts; ++g) first[g + 1] += first[g];
    for (int32_t g = 0; g <= n_experts; ++g) offsets[g] = first[g];
  }
  __syncthreads();
  int32_t cursor = e < n_experts ? first[e] : 0;
  for (int32_t c0 = 0; c0 < nk; c0 += kChunk) {
    const int32_t len = min(kChunk, nk - c0);
    for (int32_t i = e; i < len; i += blockDim.x) chunk[i] = experts[c0 + i];
    __syncthreads();
    if (e < n_experts) {
      for (int32_t i = 0; i < len; ++i) {
        if (chunk[i] != e) continue;
        rows[c0 + i] = cursor;
        src_row[cursor] = (c0 + i) / k;
        ++cursor;
      }
    }
    __syncthreads();
  }
}

__device__ __forceinline__ uint32_t load_pair(const uint16_t* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}

// y rows [offsets[g], offsets[g + 1]) (stride ldy) = x rows (stride k) · w[g]ᵀ; w[g] (n, k).
__global__ void __launch_bounds__(kWarps * 32)
    grouped_gemm_kernel(const uint16_t* x, const int32_t* offsets, int32_t n_groups,
                        const uint16_t* const* w, int32_t n, int32_t k, float* y, int64_t ldy) {
  // This CTA's group and 16-row tile: the tiles of group 0, then of group 1, …
  int32_t tile = static_cast<int32_t>(blockIdx.y), g = 0, row0 = 0, rows = 0;
  for (; g < n_groups; ++g) {
    const int32_t lo = offsets[g], hi = offsets[g + 1];
    const int32_t tiles = (hi - lo + kTileRows - 1) / kTileRows;
    if (tile < tiles) {
      row0 = lo + tile * kTileRows;
      rows = min(kTileRows, hi - row0);
      break;
    }
    tile -= tiles;
  }
  if (g == n_groups) return;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int gr = lane / 4, t = lane % 4;
  const int32_t n0 = static_cast<int32_t>(blockIdx.x) * kCtaCols + warp * kWarpCols;
  if (n0 >= n) return;
  const uint16_t* wg = w[g];
  const bool has0 = gr < rows, has1 = gr + 8 < rows;
  const uint16_t* x0 = x + static_cast<int64_t>(row0 + gr) * k + 2 * t;
  const uint16_t* x1 = x0 + static_cast<int64_t>(8) * k;
  const int32_t c0 = n0 + gr, c1 = n0 + 8 + gr;  // the W rows of this lane's two fragments
  const bool hasw0 = c0 < n, hasw1 = c1 < n;
  const uint16_t* w0 = wg + static_cast<int64_t>(hasw0 ? c0 : 0) * k + 2 * t;
  const uint16_t* w1 = wg + static_cast<int64_t>(hasw1 ? c1 : 0) * k + 2 * t;
  float acc[2][4] = {};
#pragma unroll 4
  for (int32_t k0 = 0; k0 < k; k0 += 16) {
    const bool hi = k0 + 8 < k;  // k % 8 == 0: the upper half of the last step may lie past k
    uint32_t a[4];
    a[0] = has0 ? load_pair(x0 + k0) : 0u;
    a[1] = has1 ? load_pair(x1 + k0) : 0u;
    a[2] = has0 && hi ? load_pair(x0 + k0 + 8) : 0u;
    a[3] = has1 && hi ? load_pair(x1 + k0 + 8) : 0u;
    const uint32_t b00 = hasw0 ? load_pair(w0 + k0) : 0u;
    const uint32_t b01 = hasw0 && hi ? load_pair(w0 + k0 + 8) : 0u;
    const uint32_t b10 = hasw1 ? load_pair(w1 + k0) : 0u;
    const uint32_t b11 = hasw1 && hi ? load_pair(w1 + k0 + 8) : 0u;
    ptx::mma_bf16(acc[0], a, b00, b01);
    ptx::mma_bf16(acc[1], a, b10, b11);
  }
  // Fragment f: (row gr, columns 2t, 2t + 1) in acc[f][0..1], row gr + 8 in acc[f][2..3].
#pragma unroll
  for (int f = 0; f < 2; ++f) {
    const int32_t col = n0 + f * 8 + 2 * t;
    for (int h = 0; h < 2; ++h) {
      if (gr + 8 * h >= rows) continue;
      float* out = y + static_cast<int64_t>(row0 + gr + 8 * h) * ldy + col;
      if (col < n) out[0] = acc[f][2 * h];
      if (col + 1 < n) out[1] = acc[f][2 * h + 1];
    }
  }
}

}  // namespace

cudaError_t launch_moe_group(const int32_t* experts, int32_t n, int32_t k, int32_t n_experts,
                             int32_t* offsets, int32_t* src_row, int32_t* rows,
                             cudaStream_t stream) {
  if (n_experts < 1 || n_experts > kMaxRouteExperts) return cudaErrorInvalidValue;
  const int threads = ((n_experts + 31) / 32) * 32;
  moe_group_kernel<<<1, threads, 0, stream>>>(experts, n * k, k, n_experts, offsets, src_row,
                                              rows);
  return cudaGetLastError();
}

cudaError_t launch_grouped_gemm(const uint16_t* x, const int32_t* offsets, int32_t n_groups,
                                int32_t rows_bound, const uint16_t* const* w, int32_t n,
                                int32_t k, float* y, int64_t ldy, cudaStream_t stream) {
  if (rows_bound == 0 || n_groups == 0) return cudaSuccess;
  if (k % 8 != 0 || n <= 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((n + kCtaCols - 1) / kCtaCols),
                  static_cast<unsigned>((rows_bound + kTileRows - 1) / kTileRows + n_groups));
  if (grid.y > 65535u) return cudaErrorInvalidValue;
  grouped_gemm_kernel<<<grid, kWarps * 32, 0, stream>>>(x, offsets, n_groups, w, n, k, y, ldy);
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda
