// Constrained sampling (see masked_sample.h).
#include "kernels/sampling/masked_sample.h"

#include <bit>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace detllm {

SampleResult sample_allowed(std::span<const float> logits, const DrawParams& params,
                            int64_t position, uint32_t sample_index, AllowedIds allowed,
                            AllowedScratch& scratch) {
  check(allowed.width >= 0 &&
            allowed.words.size() == (static_cast<size_t>(allowed.width) + 31) / 32,
        "constrained sampling: a bitmask of {} words for {} ids", allowed.words.size(),
        allowed.width);
  // The allowed ids in ascending order and their logits. Sampling this compact row picks the
  // same token as sampling the masked row (sampler.h): a masked id has zero mass and ranks
  // after every finite logit, so the max, every prefix mass, the top-k / top-p / min-p
  // boundaries and the draw are those of the allowed ids alone; ties go to the lower id in
  // both, as the compact order keeps the ids' order. The cost follows the allowed count.
  std::vector<int32_t>& ids = scratch.ids;
  ids.clear();
  scratch.logits.clear();
  const size_t n = std::min(logits.size(), static_cast<size_t>(allowed.width));
  bool any = false;
  for (size_t w = 0; w * 32 < n; ++w) {
    for (uint32_t bits = allowed.words[w]; bits != 0; bits &= bits - 1) {
      const size_t i = w * 32 + static_cast<size_t>(std::countr_zero(bits));
      if (i >= n) break;
      ids.push_back(static_cast<int32_t>(i));
      scratch.logits.push_back(logits[i]);
      any = any || std::isfinite(logits[i]);
    }
  }
  SampleResult result;
  if (!any) {
    result.token = -1;
    result.none_allowed = true;
    return result;
  }
  DrawParams selection = params;
  selection.n_logprobs = 0;
  result.token =
      ids[static_cast<size_t>(sample(scratch.logits, selection, position, sample_index).token)];
  result.logprob = logprob_of(logits, result.token);
  result.top_logprobs = top_logprobs(logits, params.n_logprobs);
  return result;
}

}  // namespace detllm
