// The transposed decode warp (attention_tc_decode_nq.cu), launched by the decode schedule
// (attention_tc_decode.cu) for steps of n_rep ≤ kDecNqMaxRep.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {

// Query heads per KV head the transposed warp takes: the n8 side of its products.
constexpr int kDecNqMaxRep = 8;

// The decode schedule on the transposed warp: chunks of kKvTile / parts positions (parts 2:
// halves, 4: quarters), a ring of `ring` chunks a warp (3, 4 or 6; 0 chosen), force_split as
// TcSchedule::split. The bits of attention_tc_decode.cu's warp and of the packed CTAs.
cudaError_t launch_attention_tc_decode_nq(const AttentionArgs& a, float* scratch, int force_split,
                                          int parts, int ring, cudaStream_t stream);

}  // namespace detllm::kernels::cuda
