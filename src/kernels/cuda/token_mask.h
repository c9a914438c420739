// Launchers of the token-mask kernels (token_mask.cu) behind the device path of
// Ops::sample_rows_masked (masked_sampling.h). Pointers are device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detllm {
struct SampleRowParams;  // kernels/sampling/sample_row.h
struct SampleRowResult;
}  // namespace detllm

namespace detllm::kernels::cuda {

// out (rows, vocab) = logits with every id outside row r's mask at -inf: row r's mask is
// words + mask_of_row[r] * ((vocab + 31) / 32) (bit id % 32 of word id / 32), or none (a plain
// copy) when mask_of_row[r] < 0. Each element is written once from its own input: no
// arithmetic, so the bits are the input's or -inf.
cudaError_t launch_mask_rows(const float* logits, int32_t rows, int32_t vocab,
                             const int32_t* mask_of_row, const uint32_t* words, float* out,
                             cudaStream_t stream);

// The scoring rows that follow a masked draw: out[r] = a score_token row (temperature 0, filters
// off, the Philox counter of params[r]) for the token drawn[r] (score_token -1 when drawn[r]
// has no token), with params[r].n_logprobs top logprobs where mask_of_row[r] >= 0 and none
// elsewhere (an unmasked row's result is the draw's own).
cudaError_t launch_scoring_params(const SampleRowParams* params, const SampleRowResult* drawn,
                                  const int32_t* mask_of_row, int32_t rows, SampleRowParams* out,
                                  cudaStream_t stream);

}  // namespace detllm::kernels::cuda
