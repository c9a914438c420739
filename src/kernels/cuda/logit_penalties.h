// Launcher of the logit-penalty kernel (logit_penalties.cu; used by cuda_ops.cpp). Pointers are
// device memory. The formula and its invariance argument: kernels/sampling/logit_penalties.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detllm {
struct LogitPenalty;  // kernels/sampling/logit_penalties.h
}  // namespace detllm

namespace detllm::kernels::cuda {

// logits (rows, vocab) in place: logits[e.row, e.token] = penalized_logit(logits[..], e) for
// each of the n entries (device memory; each (row, token) at most once, checked on the host
// by check_logit_penalties before the upload).
cudaError_t launch_logit_penalties(float* logits, int32_t vocab, const LogitPenalty* entries,
                                   int32_t n, cudaStream_t stream);

}  // namespace detllm::kernels::cuda
