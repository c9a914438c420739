// The reference sampler (ref_sampler.h): the specification of kernels/sampling/sampler.h step by
// step, with whole-vocab arrays and full sorts. It shares with the fast path only the
// specification's arithmetic (kernels/sampling/sampler_math.h: masses, exp/log, the top-p
// threshold, the Philox draw), not its selection or walks.
#include "kernels/ref/ref_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "kernels/sampling/sampler_math.h"

namespace detllm {
namespace {

using sampler_math::logprob_from_gap;
using sampler_math::mass;
using sampler_math::U128;

void check_logits(std::span<const float> logits) {
  check(!logits.empty(), "sampling: empty logits (vocab size 0)");
  for (size_t i = 0; i < logits.size(); ++i) {
    check(!std::isnan(logits[i]) && logits[i] != std::numeric_limits<float>::infinity(),
          "sampling: logit of token {} is {}: the model produced a non-finite value", i, logits[i]);
  }
}

// The rank order s: token ids sorted by (logit desc, token id asc).
std::vector<int32_t> rank_order(std::span<const float> logits) {
  std::vector<int32_t> rank(logits.size());
  std::iota(rank.begin(), rank.end(), 0);
  std::sort(rank.begin(), rank.end(), [&](int32_t a, int32_t b) {
    const float xa = logits[static_cast<size_t>(a)], xb = logits[static_cast<size_t>(b)];
    return xa > xb || (xa == xb && a < b);
  });
  return rank;
}

// Spec steps 1-5 for T > 0 over the rank order.
int32_t draw_token(std::span<const float> logits, const std::vector<int32_t>& rank, float max,
                   const DrawParams& params, int64_t position, uint32_t sample_index) {
  const size_t vocab = logits.size();
  const double temperature = static_cast<double>(params.temperature);
  // C[n] = mass of s(0) .. s(n-1), n = 0 .. V.
  std::vector<U128> c(vocab + 1);
  for (size_t j = 0; j < vocab; ++j) {
    c[j + 1] =
        sampler_math::add(c[j], mass(logits[static_cast<size_t>(rank[j])], max, temperature));
  }
  // 1. top-k.
  const size_t k_size =
      params.top_k > 0 ? std::min(static_cast<size_t>(params.top_k), vocab) : vocab;
  const U128 z = c[k_size];
  // 2. top-p.
  size_t n_p = k_size;
  if (params.top_p < 1.0f) {
    const U128 threshold = sampler_math::top_p_threshold(z, params.top_p);
    n_p = 1;
    while (c[n_p] < threshold) ++n_p;
  }
  // 3. min-p.
  size_t n = n_p;
  if (params.min_p > 0.0f) {
    const double log_min_p = sampler_math::log_positive(static_cast<double>(params.min_p));
    n = 0;
    while (n < n_p && sampler_math::passes_min_p(logits[static_cast<size_t>(rank[n])], max,
                                                 temperature, log_min_p)) {
      ++n;
    }
  }
  // 4-5. mass and draw.
  const uint64_t bits = sampler_math::draw_bits53(params.seed, static_cast<uint32_t>(position),
                                                  sample_index);
  const U128 target = sampler_math::draw_target(c[n], bits);
  size_t j = 0;
  while (!(c[j + 1] > target)) ++j;
  check(j < n, "sampling reference: the draw fell outside the kept set");
  return rank[j];
}

// Every token's logprob under the raw logits (max: their max, finite).
std::vector<TokenLogprob> all_logprobs(std::span<const float> logits, float max) {
  const size_t vocab = logits.size();
  U128 z1;
  for (size_t i = 0; i < vocab; ++i) z1 = sampler_math::add(z1, mass(logits[i], max, 1.0));
  const double log_z1 = sampler_math::log_normalizer(z1);
  std::vector<TokenLogprob> all(vocab);
  for (size_t i = 0; i < vocab; ++i) {
    all[i] = TokenLogprob{static_cast<int32_t>(i), logprob_from_gap(logits[i], max, log_z1)};
  }
  return all;
}

}  // namespace

SampleResult sample_reference(std::span<const float> logits, const DrawParams& params,
                              int64_t position, uint32_t sample_index) {
  params.validate();
  check_sample_position(position);
  check_logits(logits);
  const size_t vocab = logits.size();
  const float max = *std::max_element(logits.begin(), logits.end());
  check(max > -std::numeric_limits<float>::infinity(),
        "sampling: every logit is -inf: no token can be chosen");

  const std::vector<TokenLogprob> all = all_logprobs(logits, max);
  SampleResult result;
  std::vector<TokenLogprob> by_logprob = all;
  std::sort(by_logprob.begin(), by_logprob.end(), logprob_ranks_before);
  by_logprob.resize(std::min(static_cast<size_t>(params.n_logprobs), vocab));
  result.top_logprobs = by_logprob;

  const std::vector<int32_t> rank = rank_order(logits);
  result.token = params.is_greedy()
                     ? rank[0]
                     : draw_token(logits, rank, max, params, position, sample_index);
  result.logprob = all[static_cast<size_t>(result.token)].logprob;
  return result;
}

SampleRowResult sample_row_reference(std::span<const float> logits, const SampleRowParams& row) {
  if (row.score_token >= 0) {  // nothing drawn: the token's logprob and the top logprobs
    row.validate();
    check(static_cast<size_t>(row.score_token) < logits.size(),
          "sampling: score_token {} outside the vocabulary of {} ids", row.score_token,
          logits.size());
    SampleResult r =  // temperature 0 (validated): greedy, and the top logprobs
        sample_reference(logits, row, row.position, row.sample_index);
    const float max = *std::max_element(logits.begin(), logits.end());
    r.token = row.score_token;
    r.logprob = all_logprobs(logits, max)[static_cast<size_t>(row.score_token)].logprob;
    return sample_row_result_of(r);
  }
  return sample_row_result_of(
      sample_reference(logits, row, row.position, row.sample_index));
}

SampleRowResult sample_row_masked_reference(std::span<const float> logits,
                                            const SampleRowParams& row,
                                            std::span<const uint32_t> allowed) {
  check(allowed.size() == (logits.size() + 31) / 32,
        "sampling: a mask of {} words for {} logits", allowed.size(), logits.size());
  std::vector<float> masked(logits.begin(), logits.end());
  for (size_t i = 0; i < masked.size(); ++i) {
    if (((allowed[i / 32] >> (i % 32)) & 1u) == 0) {
      masked[i] = -std::numeric_limits<float>::infinity();
    }
  }
  SampleRowResult out;
  if (*std::max_element(masked.begin(), masked.end()) ==
      -std::numeric_limits<float>::infinity()) {
    out.token = -1;
    out.status = SampleRowStatus::kNoneAllowed;
    return out;
  }
  SampleRowParams draw = row;
  draw.n_logprobs = 0;
  SampleRowParams score;  // temperature 0: greedy, nothing drawn
  score.temperature = 0.0f;
  score.position = row.position;
  score.sample_index = row.sample_index;
  score.n_logprobs = row.n_logprobs;
  score.score_token = sample_row_reference(masked, draw).token;
  return sample_row_reference(logits, score);
}

}  // namespace detllm
