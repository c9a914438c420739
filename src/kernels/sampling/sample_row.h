// One row of a batched sampling call (Ops::sample_rows, kernels/ops.h): a request's
// DrawParams plus its Philox counter, and the result that comes back (token, logprob, top
// logprobs). Plain structs, the same layout in host and device code, so a device backend uploads
// the parameters and downloads only the results — never the logits. Semantics: kernels/sampling/sampler.h.
#pragma once

#include <cstdint>

#include "kernels/sampling/draw_params.h"

namespace detllm {

// DrawParams' fields (a request's, the same meaning and ranges) and the row's Philox counter.
struct SampleRowParams : DrawParams {
  uint32_t position = 0;      // absolute position of the sampled token (Philox counter word 0)
  uint32_t sample_index = 0;  // Philox counter word 1
  // -1: the row draws its token (sampler.h). >= 0 (a scoring row; temperature must be 0):
  // nothing is drawn, the result's token is score_token, its logprob and the top logprobs are
  // the row's as for any draw (logprob_of, top_logprobs). The device path of a masked draw
  // (Ops::sample_rows_masked) scores the masked draw's token under the unmasked row this way.
  int32_t score_token = -1;

  // DrawParams::validate() and score_token's rules. The engine validates a request's row once,
  // when the request is added; Ops::sample_rows takes rows that passed it.
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
  int32_t top_tokens[DrawParams::kMaxLogprobs] = {};  // (logprob desc, token asc)
  float top_logprobs[DrawParams::kMaxLogprobs] = {};
};

// The row of a request's draw at (position, sample_index): its DrawParams and that counter.
inline SampleRowParams sample_row_params(const DrawParams& p, uint32_t position,
                                         uint32_t sample_index) {
  SampleRowParams row;
  static_cast<DrawParams&>(row) = p;
  row.position = position;
  row.sample_index = sample_index;
  return row;
}

}  // namespace detllm
