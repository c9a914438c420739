// The sampler: logits of one position -> one token, its logprob and the top logprobs. A pure
// function of (logits bits, SamplingParams, position, sample index): fixed reduction orders,
// ties broken by token id, randomness from Philox keyed per token (design.md §1 and §2).
//
// Specification (sample_reference implements it literally; sample must return the same bits):
//
//   V = logits.size(), x_i = logits[i] (fp32), m = max_i x_i, d_i = double(x_i) - double(m).
//   Logits may be -inf (masked); NaN, +inf, or all -inf is an error.
//
//   exp and log below are sampler_exp and sampler_log (declared at the end): our own, so the
//   bits do not depend on the C library or the CPU.
//
//   Logprobs: log_softmax of the RAW logits (before temperature and filters; what vLLM and
//   OpenAI report), in double, with one fixed order:
//       Z1 = 0.0 + exp(d_0) + exp(d_1) + ... + exp(d_{V-1})   (ascending token id)
//       logprob_i = float(d_i - log(Z1))
//   top_logprobs: the min(n_logprobs, V) tokens first in (logprob desc, token id asc) order of
//   these float values. logprob_of() returns the same bits (shared code), so scoring a
//   finished sequence (teacher forcing) reproduces the logprobs it was generated with.
//
//   Rank order s(0), s(1), ...: tokens sorted by (x desc, token id asc), a total order. For
//   T > 0, double(x) / T is strictly increasing in x, so this is also the order of the scaled
//   logits, i.e. of the exact probabilities; weights that round equal keep this order.
//
//   Greedy (temperature == 0): token = s(0), the argmax with the lowest id. The filters are
//   not applied (each of them always keeps s(0)); no random number is drawn.
//
//   Temperature T > 0, filters in this fixed order:
//     1. weights  e_i = exp(d_i / double(T))   (so e_s(0) = 1; division, not a reciprocal)
//     2. top-k    K = {s(0) .. s(k-1)} if 0 < k < V, else every token.
//                 Z = sum of e_i over K in ascending token id (double, from 0.0).
//     3. top-p    if top_p < 1: n_p = the smallest n >= 1 with C_n >= double(top_p) * Z, where
//                 C_n = e_s(0) + ... + e_s(n-1) accumulated in rank order; |K| if none.
//                 if top_p == 1: n_p = |K|.
//     4. min-p    if min_p > 0: n = the number of leading j < n_p with
//                 d_s(j) / double(T) >= log(double(min_p))  (p >= min_p * p_max in the log
//                 domain; a prefix, since d / T never increases along the rank order).
//                 if min_p == 0: n = n_p. The kept set is {s(0) .. s(n-1)}, n >= 1.
//     5. mass     S = Z if n == |K|, else the sum of e over the kept set in ascending id.
//     6. draw     b = philox_random_block(seed, position, sample_index, 0, kSampleToken),
//                 u = uniform53_from_bits(b[0], b[1]) in [0, 1), t = u * S.
//                 Walk j = 0 .. n-1 accumulating c += e_s(j); the token is the first s(j) with
//                 t < c. If there is none (rounding), the last kept s(j) with e_s(j) > 0.
//     logprob = logprob of the chosen token under the raw logits (above).
//
// Cost (fast path): one exp pass over the vocab for Z1, a second only when T != 1 and top-k is
// off; the rank order is built lazily by partial selection (nth_element + sort of growing
// chunks with the total order), so only the prefix that the filters and the walk visit is
// ever sorted. Exact: every sum has the order fixed above, whichever path computes it.
// sample() is a pure function with no shared state: rows of a batch may be sampled in parallel.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling_params.h"

namespace detllm {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  bool operator==(const TokenLogprob&) const = default;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;                    // of `token`, under the raw logits
  std::vector<TokenLogprob> top_logprobs;  // (n_logprobs) (logprob desc, token asc)
};

// Samples the token that goes at absolute `position` (0 <= position < 2^32) for sample
// `sample_index` of the request. logits: (vocab,). Validates `params`; throws detllm::Error on
// invalid params, position or logits.
SampleResult sample(std::span<const float> logits, const SamplingParams& params, int64_t position,
                    uint32_t sample_index);

// The specification above, written the obvious way (full sorts, whole-vocab arrays). Slow;
// the tests check that sample() returns identical results.
SampleResult sample_reference(std::span<const float> logits, const SamplingParams& params,
                              int64_t position, uint32_t sample_index);

// Logprob of `token` under the raw logits, bit-identical to SampleResult::logprob. For
// scoring (teacher forcing). No allocation.
float logprob_of(std::span<const float> logits, int32_t token);

// The n most likely tokens under the raw logits, as SampleResult::top_logprobs (n may exceed
// SamplingParams::kMaxLogprobs here; it is clamped to the vocab size). For prompt logprobs.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n);

// The sampler's exp and log: IEEE +, -, *, / and exact bit operations only (no libm; the build
// forbids FMA contraction), so the bits are a function of this code alone and can be
// reproduced on another backend. Within 1 ulp of the C library's.
double sampler_exp(double x);  // x <= 0 (the sampler's range; valid up to ~600): exp(x)
double sampler_log(double x);  // finite x > 0: log(x)

}  // namespace detllm
