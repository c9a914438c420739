// The shared-split CTA of the tensor-core attention (attention_tc_shared.cu), launched by
// launch_attention_tc (attention_tc.cu) for the steps its choice gives it.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {

// Four warps share each KV split, a tile each, of at most 16 rows (tq tokens × n_rep query
// heads ≤ 16); split: a CTA per KV split (partials, then the merge kernel) or every split in
// the row's CTA. The bits of the packed CTAs and of the decode warps.
cudaError_t launch_attention_tc_shared(const AttentionArgs& a, int tq, float* partials, bool split,
                                       cudaStream_t stream);

}  // namespace detllm::kernels::cuda
