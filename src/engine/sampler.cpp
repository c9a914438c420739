// The sampler's fast path and its reference (the specification is in sampler.h). The fast
// path builds the rank order lazily by partial selection; the reference sorts everything. Both
// perform the same floating-point operations in the same order, so they agree bit for bit.
#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "core/philox.h"

namespace detllm {
namespace {

// ---- exp and log of our own ----
// Built from IEEE +, -, *, / and exact bit operations only (no libm, no FMA: the build has
// -ffp-contract=off), so their bits depend on this code alone, not on the C library version or
// the CPU that glibc's dispatch sees, and a GPU sampler can reproduce them operation for
// operation. Both are within 1 ulp of glibc's (tested).

inline constexpr double kLn2Hi = 0x1.62e42feep-1;        // ln 2 rounded to 32 bits: k * kLn2Hi
inline constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;  // is exact for |k| < 2^21; + kLn2Lo
inline constexpr double kInvLn2 = 0x1.71547652b82fep0;   // 1 / ln 2

constexpr double inv_factorial(int n) {
  double c = 1.0;
  for (int i = 2; i <= n; ++i) c /= i;
  return c;
}

// exp(x) for x <= 0 (valid up to x ~ 600). Branch-free, so loops over it vectorize.
inline double exp_nonpositive(double x) {
  // Clamp at -746 (exp rounds to 0 below it; -inf and NaN land there too). In the integer
  // domain: for negative doubles the bit pattern grows with the magnitude, and an integer
  // select is if-converted where a float compare (which may trap) is not.
  constexpr uint64_t kClampBits = std::bit_cast<uint64_t>(-746.0);
  const uint64_t x_bits = std::bit_cast<uint64_t>(x);
  const double xc = std::bit_cast<double>(x_bits > kClampBits ? kClampBits : x_bits);
  // x = k ln2 + r, |r| <= ln2 / 2; adding the shifter rounds x / ln2 to an integer k.
  constexpr double kShifter = 0x1.8p52;
  const double shifted = xc * kInvLn2 + kShifter;
  const double k = shifted - kShifter;
  const double r = (xc - k * kLn2Hi) - k * kLn2Lo;
  // exp(r) by its Taylor series to degree 13 (truncation < 1e-17 relative), Horner's rule.
  double p = inv_factorial(13);
  p = p * r + inv_factorial(12);
  p = p * r + inv_factorial(11);
  p = p * r + inv_factorial(10);
  p = p * r + inv_factorial(9);
  p = p * r + inv_factorial(8);
  p = p * r + inv_factorial(7);
  p = p * r + inv_factorial(6);
  p = p * r + inv_factorial(5);
  p = p * r + inv_factorial(4);
  p = p * r + inv_factorial(3);
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // p * 2^k as (p * 2^(k + 64)) * 2^-64: the first product is exact (k + 64 >= -1013 is a
  // normal exponent), the second rounds once, also into the subnormal range. The low bits of
  // `shifted` hold k in two's complement.
  const uint64_t biased_exponent =
      std::bit_cast<uint64_t>(shifted) - std::bit_cast<uint64_t>(kShifter) + 64 + 1023;
  return (p * std::bit_cast<double>(biased_exponent << 52)) * 0x1p-64;
}

// log(x) for finite x > 0: x = m 2^e with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact),
// s = f / (2 + f), log(1 + f) = 2 atanh(s) = f - (f^2/2 - s (f^2/2 + R)),
// R = sum_{n=1..11} 2 s^(2n) / (2n + 1).
double log_positive(double x) {
  int64_t e = 0;
  if (x < 0x1p-1022) {  // subnormal: normalize first
    x *= 0x1p54;
    e = -54;
  }
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  e += static_cast<int64_t>(bits >> 52) - 1022;  // x = m 2^e, m in [0.5, 1)
  double m = std::bit_cast<double>((bits & 0x000fffffffffffffULL) | 0x3fe0000000000000ULL);
  if (m < 0x1.6a09e667f3bcdp-1) {  // sqrt(1/2)
    m *= 2.0;
    e -= 1;
  }
  const double f = m - 1.0;
  const double s = f / (2.0 + f);
  const double z = s * s;
  double r = 2.0 / 23;
  for (int n = 10; n >= 1; --n) r = r * z + 2.0 / (2 * n + 1);
  r = r * z;
  const double half_f2 = 0.5 * f * f;
  const double de = static_cast<double>(e);
  return de * kLn2Hi + (f - (half_f2 - (s * (half_f2 + r) + de * kLn2Lo)));
}

// ---- Arithmetic shared by both paths: each quantity of the spec is computed in one place. ----

// d_i = double(x_i) - double(m)
inline double logit_gap(float x, float max) {
  return static_cast<double>(x) - static_cast<double>(max);
}

// e_i = exp(d_i / T). For T == 1, d / 1.0 == d, so these are also the terms of Z1.
inline double weight(float x, float max, double temperature) {
  return exp_nonpositive(logit_gap(x, max) / temperature);
}

// Sum of e_i over all tokens in ascending id, from 0.0: the weights of each block are computed
// in their own loop (which vectorizes; same bits per element), then added one by one in order.
double sum_weights(std::span<const float> logits, float max, double temperature) {
  constexpr size_t kBlock = 256;
  double block[kBlock];
  double sum = 0.0;
  for (size_t begin = 0; begin < logits.size(); begin += kBlock) {
    const size_t n = std::min(kBlock, logits.size() - begin);
    const float* x = logits.data() + begin;
    for (size_t i = 0; i < n; ++i) block[i] = weight(x[i], max, temperature);
    for (size_t i = 0; i < n; ++i) sum += block[i];
  }
  return sum;
}

// logprob_i = float(d_i - log(Z1))
inline float logprob_from_gap(float x, float max, double log_z1) {
  return static_cast<float>(logit_gap(x, max) - log_z1);
}

// Total order of the top logprobs: (logprob desc, token asc).
inline bool logprob_ranks_before(const TokenLogprob& a, const TokenLogprob& b) {
  return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
}

// The uniform of the draw (spec step 6).
double draw_uniform(const SamplingParams& params, int64_t position, uint32_t sample_index) {
  const PhiloxCounter block = philox_random_block(params.seed, static_cast<uint32_t>(position),
                                                  sample_index, 0, RandomDomain::kSampleToken);
  return uniform53_from_bits(block[0], block[1]);
}

void check_position(int64_t position) {
  check(position >= 0 && position <= static_cast<int64_t>(std::numeric_limits<uint32_t>::max()),
        "sampling: position {} is outside [0, 2^32): the random stream is keyed by a 32-bit "
        "position",
        position);
}

// ---- Fast path ----

// Max, lowest-id argmax and Z1 of the raw logits, with input validation.
struct LogitStats {
  float max = 0.0f;
  int32_t argmax = 0;
  double z1 = 0.0;
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
  stats.z1 = sum_weights(logits, stats.max, 1.0);
  stats.log_z1 = log_positive(stats.z1);
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

// Sum of the weights of s(0) .. s(n-1) in ascending token id (n <= order.n_sorted()).
double prefix_mass_by_id(RankOrder& order, size_t n, float max, double temperature) {
  std::vector<Candidate> kept(n);
  for (size_t j = 0; j < n; ++j) kept[j] = order[j];
  std::sort(kept.begin(), kept.end(),
            [](const Candidate& a, const Candidate& b) { return a.token < b.token; });
  double sum = 0.0;
  for (const Candidate& c : kept) sum += weight(c.logit, max, temperature);
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

// Spec steps 1-6 for T > 0.
int32_t draw_token(std::span<const float> logits, const SamplingParams& params,
                   const LogitStats& stats, RankOrder& order, int64_t position,
                   uint32_t sample_index) {
  const size_t vocab = logits.size();
  const double temperature = static_cast<double>(params.temperature);
  const float max = stats.max;

  // 2. top-k and Z.
  size_t k_size = vocab;
  double z = 0.0;
  if (params.top_k_enabled() && static_cast<size_t>(params.top_k) < vocab) {
    k_size = static_cast<size_t>(params.top_k);
    order.extend(k_size);
    z = prefix_mass_by_id(order, k_size, max, temperature);
  } else if (temperature == 1.0) {
    z = stats.z1;  // same terms, same order
  } else {
    z = sum_weights(logits, max, temperature);
  }

  // 3. top-p.
  size_t n = k_size;
  if (params.top_p < 1.0f) {
    const double threshold = static_cast<double>(params.top_p) * z;
    double cumulative = 0.0;
    size_t j = 0;
    for (; j < k_size; ++j) {
      cumulative += weight(order[j].logit, max, temperature);
      if (cumulative >= threshold) break;
    }
    n = j < k_size ? j + 1 : k_size;
  }

  // 4. min-p, as a test on d / T that is true on a prefix of the rank order.
  const double log_min_p = params.min_p > 0.0f ? log_positive(static_cast<double>(params.min_p))
                                               : -std::numeric_limits<double>::infinity();
  const auto passes_min_p = [&](float x) { return logit_gap(x, max) / temperature >= log_min_p; };
  bool kept_materialized = true;  // is the kept prefix inside order's sorted part?
  if (params.min_p > 0.0f) {
    if (n <= order.n_sorted()) {
      size_t j = 0;
      while (j < n && passes_min_p(order[j].logit)) ++j;
      n = j;
    } else {
      // Nothing has ranked the whole vocab (top-k and top-p off): count instead of sorting.
      size_t count = 0;
      for (const float x : logits) count += passes_min_p(x) ? 1 : 0;
      n = count;
      kept_materialized = n <= order.n_sorted();
    }
  }

  // 5. mass of the kept set.
  double mass = z;
  if (n < k_size) {
    if (kept_materialized) {
      mass = prefix_mass_by_id(order, n, max, temperature);
    } else {
      // Kept set = {i : passes_min_p(x_i)} (top-k and top-p off), summed in id order.
      mass = 0.0;
      for (const float x : logits) {
        if (passes_min_p(x)) mass += weight(x, max, temperature);
      }
    }
  }

  // 6. inverse CDF over the kept prefix, in rank order.
  const double target = draw_uniform(params, position, sample_index) * mass;
  double cumulative = 0.0;
  for (size_t j = 0; j < n; ++j) {
    cumulative += weight(order[j].logit, max, temperature);
    if (target < cumulative) return order[j].token;
  }
  for (size_t j = n; j-- > 0;) {
    if (weight(order[j].logit, max, temperature) > 0.0) return order[j].token;
  }
  return order[0].token;  // unreachable: e_s(0) = 1
}

}  // namespace

double sampler_exp(double x) {
  return exp_nonpositive(x);
}
double sampler_log(double x) {
  return log_positive(x);
}

SampleResult sample(std::span<const float> logits, const SamplingParams& params, int64_t position,
                    uint32_t sample_index) {
  params.validate();
  check_position(position);
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

float logprob_of(std::span<const float> logits, int32_t token) {
  const LogitStats stats = logit_stats(logits);
  check(token >= 0 && static_cast<size_t>(token) < logits.size(),
        "scoring: token id {} is outside the vocab [0, {})", token, logits.size());
  return logprob_from_gap(logits[static_cast<size_t>(token)], stats.max, stats.log_z1);
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t n) {
  check(n >= 0, "logprobs: the number of top logprobs must be >= 0, got {}", n);
  const LogitStats stats = logit_stats(logits);
  if (n == 0) return {};
  RankOrder order(logits);
  return top_logprobs_fast(logits, order, stats, n);
}

// ---- Reference: the spec of sampler.h, step by step, with whole-vocab arrays. ----

SampleResult sample_reference(std::span<const float> logits, const SamplingParams& params,
                              int64_t position, uint32_t sample_index) {
  params.validate();
  check_position(position);
  check(!logits.empty(), "sampling: empty logits (vocab size 0)");
  const size_t vocab = logits.size();
  for (size_t i = 0; i < vocab; ++i) {
    check(!std::isnan(logits[i]) && logits[i] != std::numeric_limits<float>::infinity(),
          "sampling: logit of token {} is {}: the model produced a non-finite value", i, logits[i]);
  }
  const float max = *std::max_element(logits.begin(), logits.end());
  check(max > -std::numeric_limits<float>::infinity(),
        "sampling: every logit is -inf: no token can be chosen");

  // Logprobs of the raw logits.
  double z1 = 0.0;
  for (size_t i = 0; i < vocab; ++i) z1 += weight(logits[i], max, 1.0);
  const double log_z1 = log_positive(z1);
  std::vector<TokenLogprob> all(vocab);
  for (size_t i = 0; i < vocab; ++i) {
    all[i] = TokenLogprob{static_cast<int32_t>(i), logprob_from_gap(logits[i], max, log_z1)};
  }
  SampleResult result;
  std::vector<TokenLogprob> by_logprob = all;
  std::sort(by_logprob.begin(), by_logprob.end(), logprob_ranks_before);
  by_logprob.resize(std::min(static_cast<size_t>(params.n_logprobs), vocab));
  result.top_logprobs = by_logprob;

  // Rank order s.
  std::vector<int32_t> rank(vocab);
  std::iota(rank.begin(), rank.end(), 0);
  std::sort(rank.begin(), rank.end(), [&](int32_t a, int32_t b) {
    return ranks_before(Candidate{logits[static_cast<size_t>(a)], a},
                        Candidate{logits[static_cast<size_t>(b)], b});
  });

  if (params.is_greedy()) {
    result.token = rank[0];
  } else {
    const double temperature = static_cast<double>(params.temperature);
    std::vector<double> e(vocab);  // 1. weights, by token id
    for (size_t i = 0; i < vocab; ++i) e[i] = weight(logits[i], max, temperature);
    const auto e_rank = [&](size_t j) { return e[static_cast<size_t>(rank[j])]; };

    // Sum of e over the rank prefix s(0) .. s(n-1), in ascending token id.
    const auto prefix_mass = [&](size_t n) {
      std::vector<bool> member(vocab, false);
      for (size_t j = 0; j < n; ++j) member[static_cast<size_t>(rank[j])] = true;
      double sum = 0.0;
      for (size_t i = 0; i < vocab; ++i) {
        if (member[i]) sum += e[i];
      }
      return sum;
    };

    // 2. top-k.
    const size_t k_size =
        params.top_k > 0 ? std::min(static_cast<size_t>(params.top_k), vocab) : vocab;
    const double z = prefix_mass(k_size);
    // 3. top-p.
    size_t n_p = k_size;
    if (params.top_p < 1.0f) {
      double cumulative = 0.0;
      for (size_t n = 1; n <= k_size; ++n) {
        cumulative += e_rank(n - 1);
        if (cumulative >= static_cast<double>(params.top_p) * z) {
          n_p = n;
          break;
        }
      }
    }
    // 4. min-p.
    size_t n = n_p;
    if (params.min_p > 0.0f) {
      const double log_min_p = log_positive(static_cast<double>(params.min_p));
      n = 0;
      while (n < n_p &&
             logit_gap(logits[static_cast<size_t>(rank[n])], max) / temperature >= log_min_p) {
        ++n;
      }
    }
    // 5. mass.
    const double mass = n == k_size ? z : prefix_mass(n);
    // 6. draw.
    const double target = draw_uniform(params, position, sample_index) * mass;
    double cumulative = 0.0;
    bool found = false;
    for (size_t j = 0; j < n && !found; ++j) {
      cumulative += e_rank(j);
      if (target < cumulative) {
        result.token = rank[j];
        found = true;
      }
    }
    for (size_t j = n; !found && j-- > 0;) {
      if (e_rank(j) > 0.0) {
        result.token = rank[j];
        found = true;
      }
    }
  }
  result.logprob = all[static_cast<size_t>(result.token)].logprob;
  return result;
}

}  // namespace detllm
