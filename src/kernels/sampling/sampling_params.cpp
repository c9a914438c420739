// Validation of SamplingParams: every out-of-range or non-finite value is rejected with a
// message that names the field and the allowed range, before any token is sampled.
#include "kernels/sampling/sampling_params.h"

#include <cmath>

#include "core/error.h"

namespace detllm {

void SamplingParams::validate() const {
  check(std::isfinite(temperature) && temperature >= 0.0f,
        "sampling: temperature must be a finite number >= 0 (0 = greedy), got {}", temperature);
  check(top_k >= -1, "sampling: top_k must be >= 1, or 0 / -1 to disable it, got {}", top_k);
  check(std::isfinite(top_p) && top_p > 0.0f && top_p <= 1.0f,
        "sampling: top_p must be in (0, 1] (1 = disabled), got {}", top_p);
  check(std::isfinite(min_p) && min_p >= 0.0f && min_p <= 1.0f,
        "sampling: min_p must be in [0, 1] (0 = disabled), got {}", min_p);
  check(n_logprobs >= 0 && n_logprobs <= kMaxLogprobs,
        "sampling: logprobs must be in [0, {}], got {}", kMaxLogprobs, n_logprobs);
}

}  // namespace detllm
