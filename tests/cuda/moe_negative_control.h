// The negative control of the MoE routing test — test-only code, compiled into test_cuda, never
// into the library: the routing warp of kernels/cuda/moe_route.cuh instantiated with
// MoeTieRule::kArrival, whose equal logits go to the expert met first in a scan that starts at
// expert (token mod n_experts) — ties resolved by arrival order instead of by index. The bit
// check against the reference must catch it (CudaMoe.NegativeControlArrivalTiesAreCaught).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detllm::kernels::cuda_testing {

// Ops::moe_route's shapes, device pointers; on the default stream, synchronously.
cudaError_t launch_arrival_tie_route(const float* logits, int32_t n, int32_t n_experts, int32_t k,
                                     bool renormalize, int32_t* experts, float* weights);

}  // namespace detllm::kernels::cuda_testing
