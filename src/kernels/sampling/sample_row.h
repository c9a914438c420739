// One row of a batched sampling call (Ops::sample_rows, kernels/ops.h): a request's
// SamplingParams plus its Philox counter, and the result that comes back (token, logprob, top
// logprobs). Plain structs, the same layout in host and device code, so a device backend uploads
// the parameters and downloads only the results — never the logits. Semantics: kernels/sampling/sampler.h.
#pragma once

#include <cstdint>

#include "kernels/sampling/sampling_params.h"

namespace detllm {

struct SampleRowParams {
  float temperature = 1.0f;  // SamplingParams fields, same meaning and ranges
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  uint32_t position = 0;      // absolute position of the sampled token (Philox counter word 0)
  uint32_t sample_index = 0;  // Philox counter word 1
  int32_t n_logprobs = 0;     // 0 .. SamplingParams::kMaxLogprobs
  int32_t reserved = 0;

  // Throws detllm::Error naming the field, its value and the allowed range (the checks of
  // SamplingParams::validate for these fields, the same messages). The engine builds a
  // request's row once, when the request is added, from its validated SamplingParams.
  void validate() const;
};

enum class SampleRowStatus : int32_t {
  kOk = 0,
  kNonFiniteLogit = 1,  // a logit is NaN or +inf
  kAllMasked = 2,       // every logit is -inf
};

struct SampleRowResult {
  int32_t token = 0;
  float logprob = 0.0f;  // of `token`, under the raw logits
  SampleRowStatus status = SampleRowStatus::kOk;
  int32_t n_top = 0;  // valid entries of top_tokens / top_logprobs: min(n_logprobs, vocab)
  int32_t top_tokens[SamplingParams::kMaxLogprobs] = {};  // (logprob desc, token asc)
  float top_logprobs[SamplingParams::kMaxLogprobs] = {};
};

inline SamplingParams sampling_params_of(const SampleRowParams& row) {
  SamplingParams p;
  p.temperature = row.temperature;
  p.top_k = row.top_k;
  p.top_p = row.top_p;
  p.min_p = row.min_p;
  p.seed = row.seed;
  p.n_logprobs = row.n_logprobs;
  return p;
}

inline SampleRowParams sample_row_params(const SamplingParams& p, uint32_t position,
                                         uint32_t sample_index) {
  SampleRowParams row;
  row.temperature = p.temperature;
  row.top_k = p.top_k;
  row.top_p = p.top_p;
  row.min_p = p.min_p;
  row.seed = p.seed;
  row.position = position;
  row.sample_index = sample_index;
  row.n_logprobs = p.n_logprobs;
  return row;
}

}  // namespace detllm
