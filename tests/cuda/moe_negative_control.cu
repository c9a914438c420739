// See moe_negative_control.h.
#include "cuda/moe_negative_control.h"

#include "kernels/cuda/moe_route.cuh"

namespace detllm::kernels::cuda_testing {
namespace {

__global__ void arrival_tie_route_kernel(const float* logits, int32_t n, int32_t n_experts,
                                         int32_t k, bool renormalize, int32_t* experts,
                                         float* weights) {
  extern __shared__ double terms[];  // (n_experts): one warp a block
  const int32_t t = static_cast<int32_t>(blockIdx.x);
  if (t >= n) return;
  cuda::route_token<cuda::MoeTieRule::kArrival>(logits + int64_t{t} * n_experts, n_experts, k,
                                                renormalize, experts + int64_t{t} * k,
                                                weights + int64_t{t} * k, terms,
                                                static_cast<int>(threadIdx.x), t);
}

}  // namespace

cudaError_t launch_arrival_tie_route(const float* logits, int32_t n, int32_t n_experts, int32_t k,
                                     bool renormalize, int32_t* experts, float* weights) {
  if (n == 0) return cudaSuccess;
  arrival_tie_route_kernel<<<static_cast<unsigned>(n), 32, sizeof(double) * n_experts>>>(
      logits, n, n_experts, k, renormalize, experts, weights);
  const cudaError_t err = cudaGetLastError();
  return err != cudaSuccess ? err : cudaDeviceSynchronize();
}

}  // namespace detllm::kernels::cuda_testing
