// The device path of Ops::sample_rows_masked (kernels/ops.h; CudaOps forwards to it): a
// masked copy of the rows is sampled, and the drawn tokens are scored under the unmasked rows,
// so only the masks go up and only the results come down.
//
// Why it returns sample_allowed()'s bits (kernels/sampling/masked_sample.h):
//   token   the sampler on the masked copy (mask_rows: -inf outside the mask) is sample() on
//           the masked row, which the specification's token is (the CUDA sampler returns
//           sample()'s bits; sample_allowed's compact row gives the same token).
//   logprob a score_token row over the unmasked row: logprob_of(row, token), the same
//   top      function the CUDA sampler computes for its own draws; the top logprobs are the
//           unmasked row's as for any draw.
//   none    the masked copy is all -inf exactly when no allowed id has a finite logit: the
//           sampler's kAllMasked, reported as kNoneAllowed.
// Cost: one masked copy of the rows (a read and a write of rows x vocab floats), two sampler
// launches (the second greedy: its max and Z1 passes, plus the top-logprob lists of masked
// rows), the masks' upload from pinned memory, one synchronisation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/sampling/sample_row.h"

namespace detllm::kernels::cuda {

class MaskedSampling {
 public:
  MaskedSampling() = default;
  MaskedSampling(const MaskedSampling&) = delete;
  MaskedSampling& operator=(const MaskedSampling&) = delete;
  ~MaskedSampling();

  // Ops::sample_rows_masked for logits (rows, vocab) in device memory, on `stream`; params are
  // validated by the caller, and at least one row has a mask. Throws detllm::Error like
  // Ops::sample_rows.
  void run(const float* logits, int32_t rows, int32_t vocab, const SampleRowParams* params,
           RowMasks masks, SampleRowResult* out, const SampleRowsConfig& config, int sm_count,
           cudaStream_t stream);

 private:
  // Grows to at least `bytes` (contents not kept). Only between synchronised calls.
  void* device(size_t slot, size_t bytes);
  void* pinned(size_t bytes);

  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
  void* device_[2] = {nullptr, nullptr};  // 0: uploads, results and sampler scratch; 1: masked rows
  size_t device_bytes_[2] = {0, 0};
  std::vector<SampleRowResult> results_;  // the draws', then the scores'
};

}  // namespace detllm::kernels::cuda
