// Constrained sampling (see masked_sample.h).
#include "kernels/sampling/masked_sample.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace detllm {

SampleResult sample_allowed(std::span<const float> logits, const SamplingParams& params,
                            int64_t position, uint32_t sample_index, AllowedIds allowed,
                            std::vector<float>& scratch) {
  check(allowed.width >= 0 &&
            allowed.words.size() == (static_cast<size_t>(allowed.width) + 31) / 32,
        "constrained sampling: a bitmask of {} words for {} ids", allowed.words.size(),
        allowed.width);
  scratch.assign(logits.size(), -std::numeric_limits<float>::infinity());
  const size_t n = std::min(logits.size(), static_cast<size_t>(allowed.width));
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if ((allowed.words[i >> 5] >> (i & 31)) & 1u) {
      scratch[i] = logits[i];
      any = any || std::isfinite(logits[i]);
    }
  }
  SampleResult result;
  if (!any) {
    result.token = -1;
    result.none_allowed = true;
    return result;
  }
  SamplingParams selection = params;
  selection.n_logprobs = 0;
  result.token = sample(scratch, selection, position, sample_index).token;
  result.logprob = logprob_of(logits, result.token);
  result.top_logprobs = top_logprobs(logits, params.n_logprobs);
  return result;
}

}  // namespace detllm
