// The mixture-of-experts kernels (kernels/ops.h: moe_route, moe_combine, gather_rows_rounded;
// model/moe_ffn.h runs them). Each computes a token's values from that token's row alone, with
// the host default's IEEE operations in the host default's order (kernels/moe.cpp), so the
// results are bit-identical to kernels/ref/moe_ref.h whatever the batch:
//
// - routing: a warp per token. The top-k is k rounds of a warp argmax over (key, index) —
//   the highest key, among equal keys the lowest index, NaN ranked as -inf — which selects
//   exactly the first k of the stable descending order the host's insertion keeps (every
//   comparison is exact, so the lanes' tree finds the same winner as a scan). The softmax
//   terms exp(l - max) are sampler_math's exp in double (the CPU sampler's own code,
//   compiled for the device with pinned _rn operations); each lane writes its experts' terms
//   to shared memory and lane 0 sums them in expert order (or the k chosen in rank order), as
//   the host loop does, and rounds each weight once.
// - combine: a thread per output element sums the k ranks in rank order from +0.0f with
//   __fmul_rn / __fadd_rn (no FMA contraction, no atomics), then the shared expert's
//   sigmoid(g) (double, sampler_math's exp) times its row.
// - gather: bf16 rows copied (no arithmetic).
// Test: build-cuda/tests/test_cuda --gtest_filter='CudaMoe*'.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/moe_route.cuh"

namespace detllm::kernels::cuda {
namespace {

namespace sm = ::detllm::sampler_math;

constexpr int kRouteWarps = 4;  // tokens a block
constexpr int kThreads = 256;

__global__ void moe_route_kernel(const float* logits, int32_t n, int32_t n_experts, int32_t k,
                                 bool renormalize, int32_t* experts, float* weights) {
  extern __shared__ double route_terms[];  // (kRouteWarps, n_experts)
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int32_t t = static_cast<int32_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= n) return;  // whole warps leave together
  route_token<MoeTieRule::kLowerIndex>(logits + int64_t{t} * n_experts, n_experts, k,
                                       renormalize, experts + int64_t{t} * k,
                                       weights + int64_t{t} * k, route_terms + warp * n_experts,
                                       lane, t);
}

// sigmoid(g) as kernels/moe.cpp's: double, our exp, rounded once (a NaN gate converted and
// negated as the host does: its sign decides exp_nonpositive's clamp).
__device__ inline float sigmoid_like_host(float g) {
  const double x = moe_detail::host_double_of(g);
  if (x >= 0) {
    return sm::float_of(
        sm::ddiv(1.0, sm::dadd(1.0, sm::exp_nonpositive(moe_detail::host_neg(x)))));
  }
  const double e = sm::exp_nonpositive(x);
  return sm::float_of(sm::ddiv(e, sm::dadd(1.0, e)));
}

__global__ void moe_combine_kernel(const float* y, const int32_t* rows, const float* weights,
                                   int32_t n, int32_t k, int32_t dim, const float* shared,
                                   const float* shared_gate, float* out) {
  const int64_t total = int64_t{n} * dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / dim, d = i % dim;
    float o = 0.0f;
    for (int32_t r = 0; r < k; ++r) {
      const float wr = weights[t * k + r];
      o = __fadd_rn(o, __fmul_rn(wr, y[int64_t{rows[t * k + r]} * dim + d]));
    }
    if (shared != nullptr)
      o = __fadd_rn(o, __fmul_rn(sigmoid_like_host(shared_gate[t]), shared[t * dim + d]));
    out[i] = o;
  }
}

// 16 bytes (8 bf16) a thread when dim % 8 == 0 and both bases are 16-byte aligned.
__global__ void gather_rows_x8_kernel(const uint4* x, int32_t dim8, const int32_t* rows,
                                      int32_t n_rows, uint4* out) {
  const int64_t total = int64_t{n_rows} * dim8;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / dim8, d = i % dim8;
    out[i] = x[int64_t{rows[r]} * dim8 + d];
  }
}

__global__ void gather_rows_u16_kernel(const uint16_t* x, int32_t dim, const int32_t* rows,
                                       int32_t n_rows, uint16_t* out) {
  const int64_t total = int64_t{n_rows} * dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / dim, d = i % dim;
    out[i] = x[int64_t{rows[r]} * dim + d];
  }
}

inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 16 ? 65535 * 16 : blocks));
}

}  // namespace

cudaError_t launch_moe_route(const float* logits, int32_t n, int32_t n_experts, int32_t k,
                             bool renormalize, int32_t* experts, float* weights,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (k < 1 || k > n_experts || n_experts > kMaxRouteExperts) return cudaErrorInvalidValue;
  const size_t shared = sizeof(double) * kRouteWarps * static_cast<size_t>(n_experts);
  const unsigned blocks = static_cast<unsigned>((n + kRouteWarps - 1) / kRouteWarps);
  moe_route_kernel<<<blocks, 32 * kRouteWarps, shared, stream>>>(logits, n, n_experts, k,
                                                                  renormalize, experts, weights);
  return cudaGetLastError();
}

cudaError_t launch_moe_combine(const float* y, const int32_t* rows, const float* weights,
                               int32_t n, int32_t k, int32_t dim, const float* shared,
                               const float* shared_gate, float* out, cudaStream_t stream) {
  if (n == 0 || dim == 0) return cudaSuccess;
  moe_combine_kernel<<<grid_for(int64_t{n} * dim), kThreads, 0, stream>>>(
      y, rows, weights, n, k, dim, shared, shared_gate, out);
  return cudaGetLastError();
}

cudaError_t launch_gather_rows_bf16(const uint16_t* x, int32_t dim, const int32_t* rows,
                                    int32_t n_rows, uint16_t* out, cudaStream_t stream) {
  if (n_rows == 0 || dim == 0) return cudaSuccess;
  const bool x8 = dim % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (x8) {
    gather_rows_x8_kernel<<<grid_for(int64_t{n_rows} * (dim / 8)), kThreads, 0, stream>>>(
        reinterpret_cast<const uint4*>(x), dim / 8, rows, n_rows, reinterpret_cast<uint4*>(out));
  } else {
    gather_rows_u16_kernel<<<grid_for(int64_t{n_rows} * dim), kThreads, 0, stream>>>(
        x, dim, rows, n_rows, out);
  }
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda
