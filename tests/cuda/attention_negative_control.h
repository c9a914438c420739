// The negative control of the attention invariance tests — test-only code, compiled into
// test_cuda, never into the library: the packed tensor-core CTA (kernels/cuda/
// attention_tc_kernel.cuh: 4 warps × 16 rows, a ring of 2 K/V tiles, a row's splits in its CTA)
// instantiated with LD = true, whose rows gq + 8 of each warp tile sum their tile's
// probabilities in reverse column order, so a row's bits depend on where the step places it.
// The invariance checks must catch it (CudaAttentionTc.NegativeControlLayoutDependentIsCaught).
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda_testing {

// The layout-dependent kernel on `a` (a bf16 cache; head_dim 16, 32, 64 or 128), tq tokens a
// CTA (1 ≤ tq · n_rep ≤ 64), on the default stream, synchronously.
cudaError_t launch_layout_dependent_attention(const cuda::AttentionArgs& a, int tq);

}  // namespace detllm::kernels::cuda_testing
