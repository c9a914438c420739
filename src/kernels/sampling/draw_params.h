// The sampler's own parameters: what one draw needs besides the logits and its Philox counter.
// One struct, the base of both SamplingParams (a request's settings: these plus the logit
// penalties) and SampleRowParams (one row of a batched call: these plus the counter), so the
// host sampler, the reference and the device sampler read the same fields and nothing converts
// between them. Semantics: kernels/sampling/sampler.h.
#pragma once

#include <cstdint>

namespace detllm {

struct DrawParams {
  static constexpr int32_t kMaxLogprobs = 20;  // as OpenAI's top_logprobs

  float temperature = 1.0f;  // >= 0; 0 = greedy (argmax, lowest token id among ties)
  int32_t top_k = 0;         // keep the k most likely tokens; 0 or -1 = off
  float top_p = 1.0f;        // nucleus mass in (0, 1]; 1 = off
  float min_p = 0.0f;        // keep p >= min_p * p_max, in [0, 1]; 0 = off
  uint64_t seed = 0;         // Philox key; a request without one gets it from the server
  int32_t n_logprobs = 0;    // number of top logprobs returned per token, 0 .. kMaxLogprobs

  bool is_greedy() const { return temperature == 0.0f; }
  bool top_k_enabled() const { return top_k > 0; }

  // Throws detllm::Error naming the field, its value and the allowed range.
  void validate() const;
};

}  // namespace detllm
