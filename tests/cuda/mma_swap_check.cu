// mma_swap_check.h: the exchanged-operand product against the normal one, on random operands.
// The normal product is the row-layout decode warp's (A = X, 8 query rows and 8 zero rows; B =
// Yᵀ, 8 positions an n8 tile), the exchanged one the transposed warp's (A = Y, 16 positions;
// B = Xᵀ); each element of the 8 × 16 block compared bit for bit.
#include "cuda/mma_swap_check.h"

#include <cuda_bf16.h>

#include "kernels/cuda/mma_ptx.cuh"

namespace detllm::kernels::cuda {
namespace {

using ptx::mma_bf16;
using ptx::pack_bf16;

constexpr int kKSteps = 2;  // a chain of two k-steps of 16
constexpr int kWarps = 4;

__device__ __forceinline__ uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Operand element (i, j) of matrix `which` (0: X, rows × head dims; 1: Y, positions × head
// dims; 2: C, rows × positions) of one trial: bf16 values with exponents 2^-8 … 2^8 (X, Y), fp32
// with 2^-4 … 2^10 (C), random signs and mantissas.
__device__ __forceinline__ float element(uint64_t seed, uint64_t trial, int which, int i, int j) {
  const uint64_t h = mix(seed ^ mix(trial * 3 + which) ^ (static_cast<uint64_t>(i) << 8 | j));
  const uint32_t sign = static_cast<uint32_t>(h >> 63) << 31;
  if (which < 2) {
    const uint32_t exp = 127 - 8 + static_cast<uint32_t>((h >> 32) % 17);
    return __uint_as_float(sign | exp << 23 | (static_cast<uint32_t>(h) & 0x7f) << 16);
  }
  const uint32_t exp = 127 - 4 + static_cast<uint32_t>((h >> 32) % 15);
  return __uint_as_float(sign | exp << 23 | (static_cast<uint32_t>(h) & 0x7fffff));
}

__global__ void mma_swap_kernel(uint64_t trials, uint64_t seed, unsigned long long* counts) {
  __shared__ float normal[kWarps][8][16], swapped[kWarps][8][16], control[kWarps][8][16];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gq = lane >> 2, cq = lane & 3;
  unsigned long long bad_zero = 0, bad_c = 0, bad_control = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kWarps;
  for (uint64_t t = static_cast<uint64_t>(blockIdx.x) * kWarps + warp; t < trials; t += stride) {
    auto X = [&](int r, int k) { return element(seed, t, 0, r, k); };
    auto Y = [&](int p, int k) { return element(seed, t, 1, p, k); };
    auto C = [&](int r, int p) { return element(seed, t, 2, r, p); };
    for (int with_c = 0; with_c < 2; ++with_c) {
      // Normal: D (rows × 8 positions of n8 tile h) = [X; 0] · Yᵀ (+ C), k-steps ascending.
      for (int h = 0; h < 2; ++h) {
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (with_c) {
          d[0] = C(gq, 8 * h + 2 * cq);
          d[1] = C(gq, 8 * h + 2 * cq + 1);
        }
        for (int ks = 0; ks < kKSteps; ++ks) {
          const int k0 = 16 * ks + 2 * cq;
          const uint32_t a[4] = {pack_bf16(X(gq, k0), X(gq, k0 + 1)), 0u,
                                 pack_bf16(X(gq, k0 + 8), X(gq, k0 + 9)), 0u};
          mma_bf16(d, a, pack_bf16(Y(8 * h + gq, k0), Y(8 * h + gq, k0 + 1)),
                   pack_bf16(Y(8 * h + gq, k0 + 8), Y(8 * h + gq, k0 + 9)));
        }
        normal[warp][gq][8 * h + 2 * cq] = d[0];
        normal[warp][gq][8 * h + 2 * cq + 1] = d[1];
      }
      // Exchanged: Dᵀ (16 positions × rows) = Y · Xᵀ (+ Cᵀ); ascending, and (control, with C)
      // descending.
      for (int order = 0; order < 1 + with_c; ++order) {
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (with_c) {
          d[0] = C(2 * cq, gq);
          d[1] = C(2 * cq + 1, gq);
          d[2] = C(2 * cq, gq + 8);
          d[3] = C(2 * cq + 1, gq + 8);
        }
        for (int i = 0; i < kKSteps; ++i) {
          const int ks = order == 0 ? i : kKSteps - 1 - i;
          const int k0 = 16 * ks + 2 * cq;
          const uint32_t a[4] = {pack_bf16(Y(gq, k0), Y(gq, k0 + 1)),
                                 pack_bf16(Y(gq + 8, k0), Y(gq + 8, k0 + 1)),
                                 pack_bf16(Y(gq, k0 + 8), Y(gq, k0 + 9)),
                                 pack_bf16(Y(gq + 8, k0 + 8), Y(gq + 8, k0 + 9))};
          mma_bf16(d, a, pack_bf16(X(gq, k0), X(gq, k0 + 1)),
                   pack_bf16(X(gq, k0 + 8), X(gq, k0 + 9)));
        }
        float(&out)[8][16] = order == 0 ? swapped[warp] : control[warp];
        out[2 * cq][gq] = d[0];
        out[2 * cq + 1][gq] = d[1];
        out[2 * cq][gq + 8] = d[2];
        out[2 * cq + 1][gq + 8] = d[3];
      }
      __syncwarp();
      for (int e = lane; e < 128; e += 32) {
        const uint32_t n = __float_as_uint(normal[warp][e / 16][e % 16]);
        const bool differs = n != __float_as_uint(swapped[warp][e / 16][e % 16]);
        if (with_c) {
          bad_c += differs;
          bad_control += n != __float_as_uint(control[warp][e / 16][e % 16]);
        } else {
          bad_zero += differs;
        }
      }
      __syncwarp();
    }
  }
  atomicAdd(&counts[0], bad_zero);
  atomicAdd(&counts[1], bad_c);
  atomicAdd(&counts[2], bad_control);
}

}  // namespace

cudaError_t mma_swap_check(uint64_t trials, uint64_t seed, MmaSwapCounts* out) {
  unsigned long long* counts = nullptr;
  cudaError_t err = cudaMalloc(&counts, 3 * sizeof(unsigned long long));
  if (err != cudaSuccess) return err;
  unsigned long long host[3] = {0, 0, 0};
  cudaStream_t stream =
      nullptr;  // all of it on one stream of its own (scripts/check_cuda_streams.py)
  err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaMemsetAsync(counts, 0, sizeof(host), stream);
  if (err == cudaSuccess) {
    mma_swap_kernel<<<264, kWarps * 32, 0, stream>>>(trials, seed, counts);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess)
    err = cudaMemcpyAsync(host, counts, sizeof(host), cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (stream != nullptr) cudaStreamDestroy(stream);
  cudaFree(counts);
  if (err != cudaSuccess) return err;
  out->elements = trials * 128;
  out->zero_c = host[0];
  out->nonzero_c = host[1];
  out->control = host[2];
  return cudaSuccess;
}

}  // namespace detllm::kernels::cuda
