// CUDA pointwise and row kernels: embedding, RMSNorm, RoPE, SiLU·mul, add, row gather,
// fp32→bf16, bias, and a bitwise array comparison (the GEMM planner's; KV append: kv_cache.cu).
// Each output element is computed the same way whatever the batch: pointwise ops have no
// reduction, and RMSNorm reduces a row with a fixed 256-thread tree (row_reduce.cuh, shared
// with the fused ops of fused.cu).
// Test: build-cuda/tests/test_cuda --gtest_filter='CudaVsRef*'.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/row_reduce.cuh"

namespace detllm::kernels::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n, int per_thread = 1) {
  const int64_t blocks = (n + int64_t{kThreads} * per_thread - 1) / (int64_t{kThreads} * per_thread);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 16 ? 65535 * 16 : blocks));
}

__device__ inline float bf16_bits_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

__global__ void embedding_kernel(const void* table, bool is_bf16, int64_t vocab, int64_t dim,
                                 const int32_t* ids, int32_t n, float* out) {
  const int64_t total = static_cast<int64_t>(n) * dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / dim, d = i % dim;
    const int32_t id = ids[row];
    float v = __int_as_float(0x7fc00000);  // NaN for an id outside the table
    if (id >= 0 && id < vocab) {
      v = is_bf16 ? bf16_bits_to_float(static_cast<const uint16_t*>(table)[id * dim + d])
                  : static_cast<const float*>(table)[id * dim + d];
    }
    out[i] = v;
  }
}

// One block per row, 256 threads whatever dim is, reduced by row_reduce.cuh's tree (the
// order depends on dim alone). Then out = (x * r) * w as the reference rounds it. PER > 0:
// the row in registers (row_reduce.cuh; the same bits), else the loop. out may be x.
template <int PER>
__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(const float* x, const float* w,
                                                               int32_t dim, float eps, float* out) {
  __shared__ float warp_sums[kNormWarps];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* o = out + static_cast<int64_t>(blockIdx.x) * dim;
  if constexpr (PER == 0) {
    float ss = 0.0f;
    for (int32_t d = threadIdx.x; d < dim; d += kNormThreads) ss = __fmaf_rn(xr[d], xr[d], ss);
    const float r = rms_scale(block_sum_squares(ss, warp_sums), dim, eps);
    for (int32_t d = threadIdx.x; d < dim; d += kNormThreads)
      o[d] = __fmul_rn(__fmul_rn(xr[d], r), w[d]);
  } else {
    float v[PER], g[PER];
    load_row_regs<PER, false>(xr, nullptr, w, dim, v, g);
    const float r =
        rms_scale(block_sum_squares(regs_sum_squares<PER>(v, dim), warp_sums), dim, eps);
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int32_t d = threadIdx.x + j * kNormThreads;
      if (d < dim) o[d] = __fmul_rn(__fmul_rn(v[j], r), g[j]);
    }
  }
}

// Pair i of head h of token t rotated by float(pos) * inv_freq[i]; products and the sum are
// rounded separately, as in the reference (no FMA contraction).
__global__ void rope_kernel(float* x, int32_t n, int32_t n_heads, int32_t head_dim,
                            const int32_t* positions, const float* inv_freq, int32_t half) {
  const int64_t total = static_cast<int64_t>(n) * n_heads * half;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t pair = static_cast<int32_t>(i % half);
    const int64_t th = i / half;  // t * n_heads + h
    const int32_t t = static_cast<int32_t>(th / n_heads);
    float* xh = x + th * head_dim;
    const float angle = __fmul_rn(static_cast<float>(positions[t]), inv_freq[pair]);
    float s, c;
    sincosf(angle, &s, &c);
    const float a = xh[pair], b = xh[pair + half];
    xh[pair] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    xh[pair + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  }
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    out[i] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), up[i]);
  }
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = __fadd_rn(x[i], y[i]);
}

__global__ void gather_rows_kernel(const float* x, int32_t dim, const int32_t* rows,
                                   int32_t n_rows, float* out) {
  const int64_t total = static_cast<int64_t>(n_rows) * dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / dim, d = i % dim;
    out[i] = x[static_cast<int64_t>(rows[r]) * dim + d];
  }
}

__global__ void f32_to_bf16_kernel(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

// Four elements a thread when n % 4 == 0 and the pointers are 16-byte aligned (the usual case).
__global__ void f32_to_bf16_x4_kernel(const float4* x, int64_t n4, uint2* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n4;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float4 v = x[i];
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
    uint2 o;
    o.x = *reinterpret_cast<const uint32_t*>(&lo);
    o.y = *reinterpret_cast<const uint32_t*>(&hi);
    out[i] = o;
  }
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t m, int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __fadd_rn(y[i], bias[i % n]);
}

}  // namespace

cudaError_t launch_embedding(const void* table, bool is_bf16, int64_t vocab, int64_t dim,
                             const int32_t* ids, int32_t n, float* out, cudaStream_t stream) {
  if (n == 0 || dim == 0) return cudaSuccess;
  embedding_kernel<<<grid_for(n * dim), kThreads, 0, stream>>>(table, is_bf16, vocab, dim, ids,
                                                                 n, out);
  return cudaGetLastError();
}

cudaError_t launch_rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
                           float* out, cudaStream_t stream, int row_regs) {
  if (n == 0) return cudaSuccess;
  return with_row_regs(row_regs, dim, [&](auto per) {
    rmsnorm_kernel<decltype(per)::value>
        <<<static_cast<unsigned>(n), kNormThreads, 0, stream>>>(x, w, dim, eps, out);
    return cudaGetLastError();
  });
}

cudaError_t launch_rope(float* x, int32_t n, int32_t n_heads, int32_t head_dim,
                        const int32_t* positions, const float* inv_freq, int32_t rot_dim,
                        cudaStream_t stream) {
  const int32_t half = rot_dim / 2;
  if (n == 0 || half == 0) return cudaSuccess;
  rope_kernel<<<grid_for(int64_t{n} * n_heads * half), kThreads, 0, stream>>>(
      x, n, n_heads, head_dim, positions, inv_freq, half);
  return cudaGetLastError();
}

cudaError_t launch_silu_mul(const float* gate, const float* up, int64_t n, float* out,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  silu_mul_kernel<<<grid_for(n), kThreads, 0, stream>>>(gate, up, n, out);
  return cudaGetLastError();
}

cudaError_t launch_add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(const float* x, int32_t dim, const int32_t* rows,
                               int32_t n_rows, float* out, cudaStream_t stream) {
  if (n_rows == 0) return cudaSuccess;
  gather_rows_kernel<<<grid_for(int64_t{n_rows} * dim), kThreads, 0, stream>>>(x, dim, rows,
                                                                                n_rows, out);
  return cudaGetLastError();
}

cudaError_t launch_f32_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool vec = n % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 8 == 0;
  if (vec) {
    f32_to_bf16_x4_kernel<<<grid_for(n / 4), kThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(x), n / 4, reinterpret_cast<uint2*>(out));
  } else {
    f32_to_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, out);
  }
  return cudaGetLastError();
}

// *differ = 1 when any 32-bit word of a and b differs (a flag, not a count: any order of the
// stores gives the same value).
static __global__ void any_word_differs_kernel(const uint32_t* a, const uint32_t* b,
                                               int64_t n, uint32_t* differ) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    if (a[i] != b[i]) *differ = 1u;
}

cudaError_t launch_any_word_differs(const void* a, const void* b, int64_t n_words,
                                    uint32_t* differ, cudaStream_t stream, bool reset) {
  cudaError_t err = reset ? cudaMemsetAsync(differ, 0, sizeof(uint32_t), stream) : cudaSuccess;
  if (err != cudaSuccess || n_words == 0) return err;
  const int64_t blocks = std::min<int64_t>((n_words + kThreads - 1) / kThreads, 132 * 16);
  any_word_differs_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b), n_words, differ);
  return cudaGetLastError();
}

cudaError_t launch_add_bias(float* y, const float* bias, int64_t m, int64_t n,
                            cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  add_bias_kernel<<<grid_for(m * n), kThreads, 0, stream>>>(y, bias, m, n);
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda
