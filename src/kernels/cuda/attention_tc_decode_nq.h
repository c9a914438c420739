// The transposed decode warp (attention_tc_decode_nq.cu), launched by the decode schedule
// (attention_tc_decode.cu) for steps of n_rep ≤ kDecNqMaxRep.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {

// Query heads per KV head the transposed warp takes: the n8 side of its products.
constexpr int kDecNqMaxRep = 8;

// The decode warps on the transposed warp: quarter tiles (kKvTile / 4 positions), a ring of
// plan.ring chunks a warp (3 or 6), the plan's grid. The bits of attention_tc_decode.cu's warp
// and of the packed CTAs.
cudaError_t launch_attention_tc_decode_nq(const AttentionArgs& a, float* scratch,
                                          const AttentionPlan& p, cudaStream_t stream);

}  // namespace detllm::kernels::cuda
