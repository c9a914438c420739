// The sampler's fast path (the specification is in sampler.h; the shared arithmetic in
// sampler_math.h, which the CUDA sampler uses too; the reference, which sorts everything, in
// kernels/ref/ref_sampler.cpp). The fast path builds the rank order lazily by partial selection.
// Masses are summed exactly (128-bit integers), so it and the reference agree bit for bit
// whatever order they add in. Tests: tests/kernels/sampler_test.cpp,
// tests/kernels/sampler_math_test.cpp.
#include "kernels/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/error.h"
#include "core/philox.h"
#include "kernels/sampling/masses_simd.h"
#include "kernels/sampling/sampler_math.h"

namespace detllm {
namespace {

using sampler_math::logit_gap;
using sampler_math::logprob_from_gap;
using sampler_math::mass;
using sampler_math::U128;

// Exact sum of the masses of every token at temperature T (any order gives the same value;
// the masses of a block are computed four at a time, masses_simd.h, with mass()'s bits).
U128 sum_masses(std::span<const float> logits, float max, double temperature) {
  constexpr size_t kBlock = 256;
  uint64_t block[kBlock];
  U128 sum;
  for (size_t begin = 0; begin < logits.size(); begin += kBlock) {
    const size_t n = std::min(kBlock, logits.size() - begin);
    sampler_math::masses_simd(logits.data() + begin, n, max, temperature, block);
    for (size_t i = 0; i < n; ++i) sum = sampler_math::add(sum, block[i]);
  }
  return sum;
}

// The draw's 53 random bits (spec step 5).
uint64_t draw_bits(const DrawParams& params, int64_t position, uint32_t sample_index) {
  return sampler_math::draw_bits53(params.seed, static_cast<uint32_t>(position), sample_index);
}

double log_min_p_of(const DrawParams& params) {
  return sampler_math::log_positive(static_cast<double>(params.min_p));
}

// ---- Fast path ----

// Max, lowest-id argmax and Z1 of the raw logits, with input validation.
struct LogitStats {
  float max = 0.0f;
  int32_t argmax = 0;
  U128 z1;
  double log_z1 = 0.0;
};

LogitStats logit_stats(std::span<const float> logits) {
  check(!logits.empty(), "sampling: empty logits (vocab size 0)");
  check(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
        "sampling: vocab size {} does not fit a 32-bit token id", logits.size());
  LogitStats stats;
  stats.max = -std::numeric_limits<float>::infinity();
  stats.argmax = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (!(x < std::numeric_limits<float>::infinity())) {  // NaN or +inf
      throw_error("sampling: logit of token {} is {}: the model produced a non-finite value", i, x);
    }
    if (x > stats.max) {  // strict: the first (lowest id) maximum wins
      stats.max = x;
      stats.argmax = static_cast<int32_t>(i);
    }
  }
  check(stats.argmax >= 0, "sampling: every logit is -inf: no token can be chosen");
  stats.z1 = sum_masses(logits, stats.max, 1.0);
  stats.log_z1 = sampler_math::log_normalizer(stats.z1);
  return stats;
}

struct Candidate {
  float logit;
  int32_t token;
};

// The rank order: (logit desc, token asc), a total order (tokens are distinct).
inline bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
}

// The rank order s(0), s(1), ... built on demand; [0, n_sorted) of `ranked_` is s(0) ..
// s(n_sorted - 1). Most requests only look at a short prefix, so the first chunk
// (kFirstChunk tokens) is picked in one pass over the logits with a running threshold
// (most tokens are rejected by a single comparison). Longer prefixes load every remaining
// token and extend by nth_element + sort of doubling chunks, about O(V log n + n log n) in all.
// Every step uses the total order, so the prefix is the same however it was reached.
class RankOrder {
 public:
  explicit RankOrder(std::span<const float> logits) : logits_(logits) {}

  size_t size() const { return logits_.size(); }
  size_t n_sorted() const { return n_sorted_; }

  // s(j); j < size().
  const Candidate& operator[](size_t j) {
    if (j >= n_sorted_) extend(j + 1);
    return ranked_[j];
  }

  // Makes at least min(n, size()) leading entries sorted.
  void extend(size_t n) {
    if (n <= n_sorted_) return;
    if (!all_loaded_ && n_sorted_ == 0 && n <= kFirstChunk) {
      select_first_chunk();
      if (n <= n_sorted_) return;
    }
    if (!all_loaded_) load_rest();
    const size_t target = std::min(ranked_.size(), std::max({n, 2 * n_sorted_, kFirstChunk}));
    const auto first = ranked_.begin() + static_cast<std::ptrdiff_t>(n_sorted_);
    const auto mid = ranked_.begin() + static_cast<std::ptrdiff_t>(target);
    if (mid != ranked_.end()) std::nth_element(first, mid, ranked_.end(), ranks_before);
    std::sort(first, mid, ranks_before);
    n_sorted_ = target;
  }

 private:
  static constexpr size_t kFirstChunk = 256;

  // s(0) .. s(min(kFirstChunk, V) - 1) in one pass: a buffer of up to 2 * kFirstChunk
  // candidates, compacted to its best kFirstChunk (whose last one becomes the threshold a
  // new token must rank before) whenever it fills.
  void select_first_chunk() {
    const size_t chunk = std::min(kFirstChunk, logits_.size());
    std::vector<Candidate>& buffer = ranked_;
    buffer.clear();
    buffer.reserve(2 * kFirstChunk);
    bool have_threshold = false;
    Candidate threshold{0.0f, 0};
    const auto compact = [&] {
      std::nth_element(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(chunk - 1),
                       buffer.end(), ranks_before);
      buffer.resize(chunk);
      threshold = buffer.back();  // the chunk-th best so far
      have_threshold = true;
    };
    for (size_t i = 0; i < logits_.size(); ++i) {
      const Candidate c{logits_[i], static_cast<int32_t>(i)};
      if (have_threshold && !ranks_before(c, threshold)) continue;
      buffer.push_back(c);
      if (buffer.size() == 2 * kFirstChunk) compact();
    }
    if (buffer.size() > chunk) compact();
    std::sort(buffer.begin(), buffer.end(), ranks_before);
    n_sorted_ = chunk;
    all_loaded_ = chunk == logits_.size();
  }

  // Appends every token that ranks after the sorted prefix (all of them if there is none).
  void load_rest() {
    ranked_.reserve(logits_.size());
    const bool have_prefix = n_sorted_ > 0;
    const Candidate last = have_prefix ? ranked_[n_sorted_ - 1] : Candidate{0.0f, 0};
    for (size_t i = 0; i < logits_.size(); ++i) {
      const Candidate c{logits_[i], static_cast<int32_t>(i)};
      if (!have_prefix || ranks_before(last, c)) ranked_.push_back(c);
    }
    all_loaded_ = true;
  }

  std::span<const float> logits_;  // (vocab)
  std::vector<Candidate> ranked_;  // (n_sorted sorted, then the rest once loaded)
  size_t n_sorted_ = 0;
  bool all_loaded_ = false;
};

// C_n: exact mass of s(0) .. s(n-1).
U128 prefix_mass(RankOrder& order, size_t n, float max, double temperature) {
  U128 sum;
  for (size_t j = 0; j < n; ++j)
    sum = sampler_math::add(sum, mass(order[j].logit, max, temperature));
  return sum;
}

std::vector<TokenLogprob> top_logprobs_fast(std::span<const float> logits, RankOrder& order,
                                            const LogitStats& stats, int32_t n_requested) {
  const size_t n = std::min(static_cast<size_t>(n_requested), logits.size());
  if (n == 0) return {};
  // logprob is non-increasing along the rank order, so the n best by (logprob desc, id asc)
  // lie in the rank prefix that ends after the run of tokens tied with s(n-1)'s logprob.
  const float last = logprob_from_gap(order[n - 1].logit, stats.max, stats.log_z1);
  size_t n_candidates = n;
  while (n_candidates < order.size() &&
         logprob_from_gap(order[n_candidates].logit, stats.max, stats.log_z1) == last) {
    ++n_candidates;
  }
  std::vector<TokenLogprob> result(n_candidates);
  for (size_t j = 0; j < n_candidates; ++j) {
    const Candidate& c = order[j];
    result[j] = TokenLogprob{c.token, logprob_from_gap(c.logit, stats.max, stats.log_z1)};
  }
  std::sort(result.begin(), result.end(), logprob_ranks_before);
  result.resize(n);
  return result;
}

// Spec steps 1-5 for T > 0.
int32_t draw_token(std::span<const float> logits, const DrawParams& params,
                   const LogitStats& stats, RankOrder& order, int64_t position,
                   uint32_t sample_index) {
  const size_t vocab = logits.size();
  const double temperature = static_cast<double>(params.temperature);
  const float max = stats.max;

  // 1. top-k and Z.
  size_t n = vocab;
  U128 kept_mass;  // C_n
  if (params.top_k_enabled() && static_cast<size_t>(params.top_k) < vocab) {
    n = static_cast<size_t>(params.top_k);
    kept_mass = prefix_mass(order, n, max, temperature);
  } else if (temperature == 1.0) {
    kept_mass = stats.z1;  // the same masses
  } else {
    kept_mass = sum_masses(logits, max, temperature);
  }

  // 2. top-p: the first prefix whose mass reaches ceil(top_p * Z).
  if (params.top_p < 1.0f) {
    const U128 threshold = sampler_math::top_p_threshold(kept_mass, params.top_p);
    U128 cumulative;
    size_t j = 0;
    while (j < n) {
      cumulative = sampler_math::add(cumulative, mass(order[j].logit, max, temperature));
      ++j;
      if (cumulative >= threshold) break;
    }
    n = j;
    kept_mass = cumulative;
  }

  // 3. min-p: the passing tokens are a rank prefix, so count them in any order; when they are
  // fewer than n they are the kept set, and their mass is summed in any order too.
  if (params.min_p > 0.0f) {
    const double log_min_p = log_min_p_of(params);
    size_t count = 0;
    for (const float x : logits) {
      count += sampler_math::passes_min_p(x, max, temperature, log_min_p) ? 1 : 0;
    }
    if (count < n) {
      n = count;
      kept_mass = U128{};
      for (const float x : logits) {
        if (sampler_math::passes_min_p(x, max, temperature, log_min_p)) {
          kept_mass = sampler_math::add(kept_mass, mass(x, max, temperature));
        }
      }
    }
  }

  // 4-5. inverse CDF over the kept prefix, in rank order.
  const U128 target =
      sampler_math::draw_target(kept_mass, draw_bits(params, position, sample_index));
  U128 cumulative;
  for (size_t j = 0; j < n; ++j) {
    cumulative = sampler_math::add(cumulative, mass(order[j].logit, max, temperature));
    if (cumulative > target) return order[j].token;
  }
  throw_error("sampling: internal error: the draw fell outside the kept mass");
}

}  // namespace

void check_sample_position(int64_t position) {
  check(position >= 0 && position <= static_cast<int64_t>(std::numeric_limits<uint32_t>::max()),
        "sampling: position {} is outside [0, 2^32): the random stream is keyed by a 32-bit "
        "position",
        position);
}

double sampler_exp(double x) {
  return sampler_math::exp_nonpositive(x);
}
double sampler_log(double x) {
  return sampler_math::log_positive(x);
}

SampleResult sample(std::span<const float> logits, const DrawParams& params, int64_t position,
                    uint32_t sample_index) {
  params.validate();
  check_sample_position(position);
  const LogitStats stats = logit_stats(logits);

  SampleResult result;
  std::optional<RankOrder> order;
  if (params.n_logprobs > 0) {
    order.emplace(logits);
    result.top_logprobs = top_logprobs_fast(logits, *order, stats, params.n_logprobs);
  }
  if (params.is_greedy()) {
    result.token = stats.argmax;  // = s(0)
  } else {
    if (!order) order.emplace(logits);
    result.token = draw_token(logits, params, stats, *order, position, sample_index);
  }
  result.logprob =
      logprob_from_gap(logits[static_cast<size_t>(result.token)], stats.max, stats.log_z1);
  return result;
}

SampleRowResult sample_row(std::span<const float> logits, const SampleRowParams& row) {
  if (row.score_token >= 0) return score_row(logits, row);
  return sample_row_result_of(
      sample(logits, row, row.position, row.sample_index));
}

SampleRowResult score_row(std::span<const float> logits, const SampleRowParams& row) {
  row.validate();
  check(row.score_token >= 0 && static_cast<size_t>(row.score_token) < logits.size(),
        "sampling: score_token {} outside the vocabulary of {} ids", row.score_token,
        logits.size());
  SampleResult r;
  r.token = row.score_token;
  r.logprob = logprob_of(logits, row.score_token);
  r.top_logprobs = top_logprobs(logits, row.n_logprobs);
  return sample_row_result_of(r);
}

SampleRowResult sample_row_result_of(const SampleResult& r) {
  check(r.top_logprobs.size() <= static_cast<size_t>(SamplingParams::kMaxLogprobs),
        "sampling: {} top logprobs do not fit a row result (at most {})", r.top_logprobs.size(),
        SamplingParams::kMaxLogprobs);
  SampleRowResult out;
  if (r.none_allowed) {
    out.token = -1;
    out.status = SampleRowStatus::kNoneAllowed;
    return out;
  }
  out.token = r.token;
  out.logprob = r.logprob;
  out.status = SampleRowStatus::kOk;
  out.n_top = static_cast<int32_t>(r.top_logprobs.size());
  for (size_t j = 0; j < r.top_logprobs.size(); ++j) {
    out.top_tokens[j] = r.top_logprobs[j].token;
    out.top_logprobs[j] = r.top_logprobs[j].logprob;
  }
  return out;
}

SampleResult sample_result_of(const SampleRowResult& row) {
  check(row.n_top >= 0 && row.n_top <= SamplingParams::kMaxLogprobs,
        "sampling: a row result has {} top logprobs (at most {})", row.n_top,
        SamplingParams::kMaxLogprobs);
  SampleResult out;
  if (row.status == SampleRowStatus::kNoneAllowed) {
    out.token = -1;
    out.none_allowed = true;
    return out;
  }
  check(row.status == SampleRowStatus::kOk, "sampling: a row result has status {}",
        static_cast<int32_t>(row.status));
  out.token = row.token;
  out.logprob = row.logprob;
  out.top_logprobs.resize(static_cast<size_t>(row.n_top));
  for (size_t j = 0; j < out.top_logprobs.size(); ++j) {
    out.top_logprobs[j] = TokenLogprob{row.top_tokens[j], row.top_logprobs[j]};
  }
  return out;
}

float logprob_of(std::span<const float> logits, int32_t token) {
  const LogitStats stats = logit_stats(logits);
  check(token >= 0 && static_cast<size_t>(token) < logits.size(),
        "scoring: token id {} is outside the vocab [0, {})", token, logits.size());
  return logprob_from_gap(logits[static_cast<size_t>(token)], stats.max, stats.log_z1);
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n) {
  check(n >= 0, "logprobs: the number of top logprobs must be >= 0, got {}", n);
  if (n == 0) return {};  // (logprob_of, beside every call, checks the row's values)
  const LogitStats stats = logit_stats(logits);
  RankOrder order(logits);
  return top_logprobs_fast(logits, order, stats, n);
}

}  // namespace detllm
