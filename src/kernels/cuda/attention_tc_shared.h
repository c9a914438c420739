// The shared-split CTA of the tensor-core attention (attention_tc_shared.cu), launched by
// launch_attention_tc (attention_tc.cu) for the steps its choice gives it.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {

// Four warps share each KV split, a tile each, of at most 16 rows (tq tokens × n_rep query
// heads ≤ 16); split: a CTA per KV split (partials, then the merge kernel, or
// the group's last CTA when merge_counters is not null, or — cluster_merge, at most 8 splits —
// the row's split CTAs as one cluster, merging through their shared memory) or every split in
// the row's CTA. The bits of the packed CTAs and of the decode warps.
cudaError_t launch_attention_tc_shared(const AttentionArgs& a, int tq, float* partials, bool split,
                                       unsigned int* merge_counters, bool cluster_merge,
                                       cudaStream_t stream);
// Whether the cluster merge runs for rows of `splits` splits at head_dim (else the merge
// kernel does): 2…8 splits and such clusters resident on this device (tests assert it).
bool attention_tc_cluster_merge_fits(int head_dim, int splits);

}  // namespace detllm::kernels::cuda
