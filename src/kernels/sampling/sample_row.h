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
  // -1: the row draws its token (sampler.h). >= 0 (a scoring row; temperature must be 0):
  // nothing is drawn, the result's token is score_token, its logprob and the top logprobs are
  // the row's as for any draw (logprob_of, top_logprobs). The device path of a masked draw
  // (Ops::sample_rows_masked) scores the masked draw's token under the unmasked row this way.
  int32_t score_token = -1;

  // Throws detllm::Error naming the field, its value and the allowed range (the checks of
  // SamplingParams::validate for these fields, the same messages). The engine builds a
  // request's row once, when the request is added, from its validated SamplingParams.
  void validate() const;
};

enum class SampleRowStatus : int32_t {
  kOk = 0,
  kNonFiniteLogit = 1,  // a logit is NaN or +inf
  kAllMasked = 2,       // every logit is -inf
  // Ops::sample_rows_masked only: no id the row's mask allows has a finite logit (the engine
  // ends the request, finish_reason "grammar"). Never an error.
  kNoneAllowed = 3,
};

// The token masks of an Ops::sample_rows_masked call (host memory): row r may only draw an id
// whose bit is set in its mask — bit id % 32 of words[begin[r] + id / 32], (vocab + 31) / 32
// words — or any id when begin[r] == -1. Semantics: kernels/sampling/masked_sample.h.
struct RowMasks {
  const uint32_t* words = nullptr;
  const int64_t* begin = nullptr;  // (rows)
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
