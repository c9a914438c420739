// The sampler: logits of one position -> one token, its logprob and the top logprobs. A pure
// function of (logits bits, SamplingParams, position, sample index): fixed reduction orders,
// ties broken by token id, randomness from Philox keyed per token (design.md §1 and §2).
//
// Specification (sample_reference, kernels/ref/ref_sampler.h, implements it literally; sample()
// and the CUDA sampler (kernels/cuda/sampling.cu) must return the same bits; the shared
// arithmetic is in kernels/sampling/sampler_math.h):
//
//   V = logits.size(), x_i = logits[i] (fp32), m = max_i x_i, d_i = double(x_i) - double(m).
//   Logits may be -inf (masked); NaN, +inf, or all -inf is an error.
//
//   exp and log below are sampler_exp and sampler_log (declared at the end): our own, so the
//   bits do not depend on the C library, the CPU or the GPU.
//
//   Masses: every sum over tokens adds exact fixed-point masses q = floor(e * 2^63) (e in
//   [0, 1], so q <= 2^63) as 128-bit integers. Integer sums do not depend on the order, so
//   the CPU's sequential loops and the GPU's block reductions, radix-select bucket sums and
//   atomics all give the same value (the canonical order question disappears).
//
//   Logprobs: log_softmax of the RAW logits (before temperature and filters; what vLLM and
//   OpenAI report):
//       Z1 = sum of q(exp(d_i)) over all tokens (exact),  z1 = double(Z1) * 2^-63 (rounded
//       to nearest even, >= 1),  logprob_i = float(d_i - log(z1))
//   top_logprobs: the min(n_logprobs, V) tokens first in (logprob desc, token id asc) order of
//   these float values. logprob_of() returns the same bits (shared code), so scoring a
//   finished sequence (teacher forcing) reproduces the logprobs it was generated with.
//
//   Rank order s(0), s(1), ...: tokens sorted by (x desc, token id asc), a total order (-0.0
//   ties +0.0). For T > 0, d / T is non-increasing along it, and so are the masses below.
//
//   Greedy (temperature == 0): token = s(0), the argmax with the lowest id. The filters are
//   not applied (each of them always keeps s(0)); no random number is drawn.
//
//   Temperature T > 0, with q_i = floor(exp(d_i / double(T)) * 2^63) (division, not a
//   reciprocal; q_s(0) = 2^63) and C_n = q_s(0) + ... + q_s(n-1) (exact), filters in order:
//     1. top-k    |K| = k if 0 < k < V, else V (K = {s(0) .. s(|K|-1)}).  Z = C_|K|.
//     2. top-p    if top_p < 1: n_p = the smallest n >= 1 with C_n >= ceil(top_p * Z) (exact
//                 rational product; n_p <= |K|). if top_p == 1: n_p = |K|.
//     3. min-p    if min_p > 0: n = min(n_p, #{i : d_i / double(T) >= log(double(min_p))})
//                 (p >= min_p * p_max in the log domain; the tokens passing are a rank prefix).
//                 if min_p == 0: n = n_p. The kept set is {s(0) .. s(n-1)}, n >= 1.
//     4. mass     S = C_n.
//     5. draw     b = philox_random_block(seed, position, sample_index, 0, kSampleToken),
//                 u53 = the top 53 bits of (b[0], b[1]) (uniform53_from_bits = u53 * 2^-53),
//                 t = floor(u53 * S / 2^53) (exact, < S). The token is s(j) for the smallest
//                 j with C_(j+1) > t (so its mass is > 0; it lies in the kept set).
//     logprob = logprob of the chosen token under the raw logits (above).
//
// Cost (fast path): one exp pass over the vocab for Z1, a second only when T != 1 and top-k is
// off; the rank order is built lazily by partial selection (nth_element + sort of growing
// chunks with the total order), so only the prefix that the filters and the walk visit is
// ever sorted. sample() is a pure function with no shared state: rows of a batch may be sampled
// in parallel. The GPU never sorts: it finds each prefix boundary by a radix select over the
// rank key (sampler_math.h, rank_key) with exact bucket masses.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/sampling/sample_row.h"
#include "kernels/sampling/sampling_params.h"

namespace detllm {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  bool operator==(const TokenLogprob&) const = default;
};

// The total order of top_logprobs: (logprob desc, token asc).
inline bool logprob_ranks_before(const TokenLogprob& a, const TokenLogprob& b) {
  return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
}

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;                    // of `token`, under the raw logits
  std::vector<TokenLogprob> top_logprobs;  // (n_logprobs) (logprob desc, token asc)
  // A constrained draw (masked_sample.h) whose grammar allowed no token here: token, logprob
  // and top_logprobs are unset.
  bool none_allowed = false;
};

// Samples the token that goes at absolute `position` (0 <= position < 2^32) for sample
// `sample_index` of the request. logits: (vocab,). Validates `params`; throws detllm::Error on
// invalid params, position or logits.
SampleResult sample(std::span<const float> logits, const DrawParams& params, int64_t position,
                    uint32_t sample_index);

// Throws detllm::Error unless 0 <= position < 2^32 (the Philox counter word it keys).
void check_sample_position(int64_t position);

// Logprob of `token` under the raw logits, bit-identical to SampleResult::logprob. For
// scoring (teacher forcing). No allocation.
float logprob_of(std::span<const float> logits, int32_t token);

// The n most likely tokens under the raw logits, as SampleResult::top_logprobs (n may exceed
// SamplingParams::kMaxLogprobs here; it is clamped to the vocab size). For prompt logprobs.
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n);

// One row of a batched call (Ops::sample_rows' host default): sample() on logits (vocab,) with
// the row's params and Philox counter, as a SampleRowResult. Throws like sample().
SampleRowResult sample_row(std::span<const float> logits, const SampleRowParams& row);
// A scoring row (row.score_token >= 0): token = score_token, logprob = logprob_of(logits,
// token), top logprobs = top_logprobs(logits, row.n_logprobs). sample_row() on such a row.
SampleRowResult score_row(std::span<const float> logits, const SampleRowParams& row);
// out[r] = sample_row(row r of logits (rows, vocab), params[r]) for host memory: what the host
// backends' Ops::sample_rows runs, and the engine's host sampling (EngineConfig::host_sampling).
void sample_rows_host(const float* logits, int32_t rows, int32_t vocab,
                      const SampleRowParams* params, SampleRowResult* out);

// A batched call's result as sample() returns it (the same token, logprob and top logprobs),
// and back (at most SamplingParams::kMaxLogprobs top logprobs).
SampleResult sample_result_of(const SampleRowResult& row);
SampleRowResult sample_row_result_of(const SampleResult& result);

// The sampler's exp and log: IEEE +, -, *, / and exact bit operations only (no libm; the build
// forbids FMA contraction), so the bits are a function of this code alone and can be
// reproduced on another backend. Within 1 ulp of the C library's.
double sampler_exp(double x);  // x <= 0 (the sampler's range; valid up to ~600): exp(x)
double sampler_log(double x);  // finite x > 0: log(x)

}  // namespace detllm
