// Constrained sampling (structured output, docs/structured_output.md): a draw whose request has
// a grammar may only pick an id the grammar allows at that position.
//
// Specification. allowed = the grammar's bitmask at the position (bit id % 32 of word id / 32;
// ids at or past its width are never allowed). With masked_i = allowed(i) ? x_i : -inf:
//   token         = sample(masked, params, position, sample_index).token  (sampler.h: the same
//                   filters and the same Philox draw, over the allowed ids only)
//   logprob       = logprob_of(x, token)           — under the UNMASKED row
//   top_logprobs  = top_logprobs(x, n_logprobs)    — under the unmasked row
// The reported logprobs are the model's (penalties included, as for every draw), not the
// renormalised masked distribution: they equal what scoring the same tokens gives (prompt
// logprobs, echo), and what a trainer computes from the model. When no allowed id has a
// finite logit the draw has no token: none_allowed is set (the engine ends the request).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/sampling/sampler.h"

namespace detllm {

struct AllowedIds {
  std::span<const uint32_t> words;  // (width + 31) / 32
  int32_t width = 0;
};

// Reused storage of sample_allowed: the allowed ids and their logits (the compact row).
struct AllowedScratch {
  std::vector<int32_t> ids;
  std::vector<float> logits;
};

// The specification above.
SampleResult sample_allowed(std::span<const float> logits, const DrawParams& params,
                            int64_t position, uint32_t sample_index, AllowedIds allowed,
                            AllowedScratch& scratch);

}  // namespace detllm
