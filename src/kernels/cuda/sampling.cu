// Sampling on the device: one block per row of a logits matrix (rows, vocab) fp32, each row with
// its own SampleRowParams; the result (token, logprob, top logprobs) is bit-identical to the CPU
// sampler (kernels/sampling/sampler.h: the spec; kernels/sampling/sampler_math.h: the shared per-element math).
// Test: build-cuda/tests/test_cuda --gtest_filter='CudaSampling*' (tests/cuda/cuda_sampling_test.cpp).
//
// How it stays identical without sorting the vocabulary:
//   - every sum is of exact 128-bit fixed-point masses (sampler_math.h), so block reductions,
//     warp-aggregated shared-memory atomics and the CPU's sequential loops give the same value;
//   - every prefix of the rank order (logit desc, id asc) that the spec needs — top-k, the top-p
//     boundary, the min-p kept mass, the inverse-CDF draw, the top-logprobs cut — is "the
//     smallest rank prefix whose (count or mass) reaches a target", found by a radix select on
//     the integer rank key ((value key << id_bits) | id, unique per token): 8 bits a pass from
//     the top, each pass a histogram of counts and exact masses of the candidates that share the
//     prefix found so far; it stops when the chosen bucket holds one token;
//   - the per-element values (d, exp, q, logprob, the min-p test) come from the same DETLLM_HD
//     functions as on the CPU, with __dadd_rn/__dmul_rn/__ddiv_rn (no contraction).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/sampling/sample_row.h"
#include "kernels/sampling/sampler_math.h"

namespace detllm::kernels::cuda {
namespace {

namespace sm = ::detllm::sampler_math;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxTop = SamplingParams::kMaxLogprobs;
// A radix-select pass over the whole vocabulary also collects the tokens of the current prefix
// when they are at most this many; the later passes then visit only those.
constexpr int kMaxCandidates = 4096;
constexpr unsigned kFull = 0xffffffffu;

struct Shared {
  // radix-select histogram (256 buckets of 8-bit digits)
  unsigned int count[256];
  unsigned long long mass_lo[256];
  unsigned long long mass_hi[256];
  // reductions and broadcasts
  unsigned long long red_a[kWarps];
  unsigned long long red_b[kWarps];
  unsigned long long bcast_a;
  unsigned long long bcast_b;
  // search state (written by thread 0)
  int chosen;
  unsigned int acc_count;
  unsigned long long acc_mass_lo, acc_mass_hi;  // (no U128 here: __shared__ has no constructors)
  unsigned int bucket_count;
  unsigned long long bucket_mass_lo, bucket_mass_hi;
  unsigned long long found_key;
  // candidates: the tokens of the prefix found so far, once they fit (search_prefix)
  int n_cand;
  int cand[kMaxCandidates];
  // top logprobs collection
  int n_list;
  int list_token[kMaxTop];
  float list_logprob[kMaxTop];
};

__device__ inline sm::U128 shfl_down_u128(sm::U128 v, int offset) {
  sm::U128 r;
  r.lo = __shfl_down_sync(kFull, v.lo, offset);
  r.hi = __shfl_down_sync(kFull, v.hi, offset);
  return r;
}

// Exact sum over the block (every thread gets it).
__device__ sm::U128 block_sum(sm::U128 v, Shared& s) {
  for (int offset = 16; offset > 0; offset >>= 1) v = sm::add(v, shfl_down_u128(v, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    s.red_a[warp] = v.lo;
    s.red_b[warp] = v.hi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sm::U128 total;
    for (int w = 0; w < kWarps; ++w) {
      sm::U128 part;
      part.lo = s.red_a[w];
      part.hi = s.red_b[w];
      total = sm::add(total, part);
    }
    s.bcast_a = total.lo;
    s.bcast_b = total.hi;
  }
  __syncthreads();
  sm::U128 total;
  total.lo = s.bcast_a;
  total.hi = s.bcast_b;
  __syncthreads();  // the next reduction may overwrite red_* / bcast_*
  return total;
}

__device__ unsigned int block_count(unsigned int v, Shared& s) {
  return static_cast<unsigned int>(block_sum(sm::u128(v), s).lo);
}

__device__ unsigned long long block_min(unsigned long long v, Shared& s) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const unsigned long long o = __shfl_down_sync(kFull, v, offset);
    v = o < v ? o : v;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) s.red_a[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long m = s.red_a[0];
    for (int w = 1; w < kWarps; ++w) m = s.red_a[w] < m ? s.red_a[w] : m;
    s.bcast_a = m;
  }
  __syncthreads();
  const unsigned long long m = s.bcast_a;
  __syncthreads();
  return m;
}

__device__ inline sm::U128 shfl_xor_u128(sm::U128 v, int offset) {
  sm::U128 r;
  r.lo = __shfl_xor_sync(kFull, v.lo, offset);
  r.hi = __shfl_xor_sync(kFull, v.hi, offset);
  return r;
}

// Digit groups per warp up to which a butterfly per group beats one atomic per lane.
constexpr int kButterflyGroups = 4;

// bucket d's exact mass += m (128-bit, carried from the low word).
__device__ inline void add_mass(Shared& s, unsigned int d, sm::U128 m) {
  const unsigned long long old = atomicAdd(&s.mass_lo[d], m.lo);
  const unsigned long long carry = old + m.lo < old ? 1u : 0u;
  if (m.hi + carry != 0) atomicAdd(&s.mass_hi[d], m.hi + carry);
}

struct KeyOf {
  bool valid;
  unsigned long long key;
};

// The end of the smallest key-ordered prefix (over the tokens with a valid key) whose count
// (by_mass false) or exact mass (by_mass true) reaches the target; the caller guarantees the
// whole set reaches it. Returns the boundary key and the aggregates of the prefix including it.
struct Boundary {
  bool ok;
  unsigned long long key;
  unsigned int count;
  sm::U128 mass;
};

template <bool kWithMass, typename KeyFn, typename MassFn>
__device__ Boundary search_prefix(int vocab, int total_bits, KeyFn key_of, MassFn mass_of,
                                  bool by_mass, unsigned int target_count, sm::U128 target_mass,
                                  Shared& s) {
  const int tid = threadIdx.x, lane = tid % 32;
  unsigned long long prefix = 0;
  int hi = total_bits;  // bits above `hi` are fixed to `prefix`
  if (tid == 0) {
    s.acc_count = 0;
    s.acc_mass_lo = 0;
    s.acc_mass_hi = 0;
  }
  // The tokens a pass visits: the whole vocabulary, or (use_list) the candidates collected by
  // an earlier pass — exactly the tokens of the prefix then, a superset of the current
  // prefix's. Which tokens are visited changes no sum: the others are outside the prefix.
  bool use_list = false;
  unsigned int prefix_count = static_cast<unsigned int>(vocab);  // tokens of the prefix
  while (true) {
    const bool collect = !use_list && prefix_count <= static_cast<unsigned int>(kMaxCandidates);
    const int n_visit = use_list ? s.n_cand : vocab;
    if (collect && tid == 0) s.n_cand = 0;
    const int width = hi < 8 ? hi : 8;
    const int shift = hi - width;
    const unsigned int n_buckets = 1u << width;
    for (int d = tid; d < 256; d += kThreads) {
      s.count[d] = 0;
      s.mass_lo[d] = 0;
      s.mass_hi[d] = 0;
    }
    __syncthreads();
    for (int base = 0; base < n_visit; base += kThreads) {
      const int i = base + tid < n_visit ? (use_list ? s.cand[base + tid] : base + tid) : -1;
      bool in = false;
      unsigned int digit = 0xffffffffu;  // lanes outside the bucket match only each other
      unsigned long long q = 0;
      if (i >= 0) {
        const KeyOf k = key_of(i);
        if (k.valid && (k.key >> hi) == prefix) {
          in = true;
          if (collect) s.cand[atomicAdd(&s.n_cand, 1)] = i;
          digit = static_cast<unsigned int>(k.key >> shift) & (n_buckets - 1);
          if constexpr (kWithMass) q = mass_of(i);
        }
      }
      if (__ballot_sync(kFull, in) == 0) continue;
      // Warp aggregation (exact, order-free integer sums, so any grouping gives the same
      // bucket totals): a warp whose candidates share few digits — the usual case, logits
      // cluster — sums each digit's masses by one butterfly and adds them with one atomic;
      // a warp of many distinct digits adds each lane's own.
      const unsigned int peers = __match_any_sync(kFull, digit);
      const bool leader = in && lane == __ffs(peers) - 1;
      const unsigned int leaders = __ballot_sync(kFull, leader);
      if (!kWithMass) {
        if (leader) atomicAdd(&s.count[digit], static_cast<unsigned int>(__popc(peers)));
      } else if (__popc(leaders) <= kButterflyGroups) {
        for (unsigned int rest = leaders; rest != 0; rest &= rest - 1) {
          const int first = __ffs(rest) - 1;
          const unsigned int d = __shfl_sync(kFull, digit, first);
          sm::U128 sum = sm::u128(in && digit == d ? q : 0ull);
          for (int offset = 16; offset > 0; offset >>= 1)
            sum = sm::add(sum, shfl_xor_u128(sum, offset));
          if (lane == first) {
            atomicAdd(&s.count[d], static_cast<unsigned int>(__popc(peers)));
            add_mass(s, d, sum);
          }
        }
      } else if (in) {
        atomicAdd(&s.count[digit], 1u);
        add_mass(s, digit, sm::u128(q));
      }
    }
    __syncthreads();
    if (tid == 0) {
      int chosen = -1;
      unsigned int acc_count = s.acc_count;
      sm::U128 acc_mass;
      acc_mass.lo = s.acc_mass_lo;
      acc_mass.hi = s.acc_mass_hi;
      for (unsigned int d = 0; d < n_buckets; ++d) {
        sm::U128 bucket;
        bucket.lo = s.mass_lo[d];
        bucket.hi = s.mass_hi[d];
        const unsigned int c = acc_count + s.count[d];
        const sm::U128 m = sm::add(acc_mass, bucket);
        if (by_mass ? m >= target_mass : c >= target_count) {
          chosen = static_cast<int>(d);
          s.bucket_count = s.count[d];
          s.bucket_mass_lo = bucket.lo;
          s.bucket_mass_hi = bucket.hi;
          break;
        }
        acc_count = c;
        acc_mass = m;
      }
      s.chosen = chosen;
      s.acc_count = acc_count;
      s.acc_mass_lo = acc_mass.lo;
      s.acc_mass_hi = acc_mass.hi;
    }
    __syncthreads();
    const int chosen = s.chosen;
    const unsigned int bucket_count = s.bucket_count;
    use_list = use_list || collect;
    prefix_count = bucket_count;
    __syncthreads();  // before the histogram is cleared again
    if (chosen < 0 || bucket_count == 0) return Boundary{false, 0, 0, sm::U128{}};
    prefix = (prefix << width) | static_cast<unsigned long long>(chosen);
    hi = shift;
    if (bucket_count == 1 || hi == 0) {
      unsigned long long key = prefix;
      if (hi > 0) {  // the bucket's only token: find its low bits
        const int n_find = use_list ? s.n_cand : vocab;
        for (int j = tid; j < n_find; j += kThreads) {
          const KeyOf k = key_of(use_list ? s.cand[j] : j);
          if (k.valid && (k.key >> hi) == prefix) s.found_key = k.key;
        }
        __syncthreads();
        key = s.found_key;
      }
      sm::U128 acc_mass, bucket_mass;
      acc_mass.lo = s.acc_mass_lo;
      acc_mass.hi = s.acc_mass_hi;
      bucket_mass.lo = s.bucket_mass_lo;
      bucket_mass.hi = s.bucket_mass_hi;
      Boundary b{true, key, s.acc_count + s.bucket_count, sm::add(acc_mass, bucket_mass)};
      __syncthreads();
      return b;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* __restrict__ logits, int vocab, int id_bits,
                       const SampleRowParams* __restrict__ params, SampleRowResult* results) {
  __shared__ Shared s;
  const int tid = threadIdx.x;
  const float* x = logits + static_cast<size_t>(blockIdx.x) * static_cast<size_t>(vocab);
  const SampleRowParams p = params[blockIdx.x];
  SampleRowResult* out = results + blockIdx.x;
  const unsigned long long id_mask = (1ull << id_bits) - 1;
  const int rank_bits = 32 + id_bits;

  // 1. Validation and s(0) (the smallest rank key: the max with the lowest id).
  unsigned int bad = 0;
  unsigned long long best = ~0ull;
  for (int i = tid; i < vocab; i += kThreads) {
    const float v = x[i];
    if (!(v < __int_as_float(0x7f800000))) bad = 1;  // NaN or +inf
    const unsigned long long k = sm::rank_key(v, static_cast<uint32_t>(i), id_bits);
    best = k < best ? k : best;
  }
  bad = block_count(bad, s);
  best = block_min(best, s);
  if (bad != 0 || (best >> id_bits) == sm::rank_value_key_neg_inf()) {
    if (tid == 0) {
      out->status = bad != 0 ? SampleRowStatus::kNonFiniteLogit : SampleRowStatus::kAllMasked;
      out->token = -1;
      out->n_top = 0;
    }
    return;
  }
  const int argmax = static_cast<int>(best & id_mask);
  const float max = x[argmax];

  // 2. Z1 and log Z1 (the raw logits' normalizer).
  sm::U128 local;
  for (int i = tid; i < vocab; i += kThreads) local = sm::add(local, sm::mass(x[i], max, 1.0));
  const sm::U128 z1 = block_sum(local, s);
  const double log_z1 = sm::log_normalizer(z1);

  const auto rank_key_of = [&](int i) {
    return KeyOf{true, sm::rank_key(x[i], static_cast<uint32_t>(i), id_bits)};
  };
  const auto no_mass = [](int) { return 0ull; };

  // 3. Top logprobs: the n_top best by (logprob desc, id asc). logprob is non-decreasing in the
  // logit, so they are: every token with logprob > L* (L* = logprob of s(n_top - 1)), then the
  // lowest ids among those with logprob == L*.
  const int n_top = p.n_logprobs < vocab ? p.n_logprobs : vocab;
  if (n_top > 0) {
    const Boundary last = search_prefix<false>(vocab, rank_bits, rank_key_of, no_mass, false,
                                               static_cast<unsigned int>(n_top), sm::U128{}, s);
    const float l_star = sm::logprob_from_gap(x[last.key & id_mask], max, log_z1);
    unsigned int above = 0;
    for (int i = tid; i < vocab; i += kThreads) {
      above += sm::logprob_from_gap(x[i], max, log_z1) > l_star ? 1u : 0u;
    }
    above = block_count(above, s);
    const auto tied_key_of = [&](int i) {
      return KeyOf{sm::logprob_from_gap(x[i], max, log_z1) == l_star,
                   static_cast<unsigned long long>(i)};
    };
    const Boundary tied = search_prefix<false>(vocab, id_bits, tied_key_of, no_mass, false,
                                               static_cast<unsigned int>(n_top) - above,
                                               sm::U128{}, s);
    if (tid == 0) s.n_list = 0;
    __syncthreads();
    for (int i = tid; i < vocab; i += kThreads) {
      const float lp = sm::logprob_from_gap(x[i], max, log_z1);
      if (lp > l_star || (lp == l_star && static_cast<unsigned long long>(i) <= tied.key)) {
        const int slot = atomicAdd(&s.n_list, 1);
        if (slot < kMaxTop) {
          s.list_token[slot] = i;
          s.list_logprob[slot] = lp;
        }
      }
    }
    __syncthreads();
    if (tid == 0) {
      const int n = s.n_list < kMaxTop ? s.n_list : kMaxTop;
      for (int a = 1; a < n; ++a) {  // insertion sort by (logprob desc, id asc)
        const int t = s.list_token[a];
        const float lp = s.list_logprob[a];
        int b = a;
        while (b > 0 && (s.list_logprob[b - 1] < lp ||
                         (s.list_logprob[b - 1] == lp && s.list_token[b - 1] > t))) {
          s.list_token[b] = s.list_token[b - 1];
          s.list_logprob[b] = s.list_logprob[b - 1];
          --b;
        }
        s.list_token[b] = t;
        s.list_logprob[b] = lp;
      }
      for (int j = 0; j < n; ++j) {
        out->top_tokens[j] = s.list_token[j];
        out->top_logprobs[j] = s.list_logprob[j];
      }
      // A count other than n_top means the selection broke: report it, never a wrong list.
      out->n_top = (last.ok && tied.ok && s.n_list == n_top) ? n_top : -1;
    }
    __syncthreads();
  } else if (tid == 0) {
    out->n_top = 0;
  }

  // 4. The token (spec steps 1-5 of sampler.h).
  int token = argmax;
  bool ok = true;
  if (p.temperature != 0.0f) {
    const double temperature = static_cast<double>(p.temperature);
    const auto mass_of = [&](int i) { return sm::mass(x[i], max, temperature); };
    unsigned int n = static_cast<unsigned int>(vocab);
    sm::U128 kept;
    if (p.top_k > 0 && p.top_k < vocab) {  // 1. top-k
      const Boundary k = search_prefix<true>(vocab, rank_bits, rank_key_of, mass_of, false,
                                             static_cast<unsigned int>(p.top_k), sm::U128{}, s);
      ok = ok && k.ok;
      n = static_cast<unsigned int>(p.top_k);
      kept = k.mass;
    } else if (temperature == 1.0) {
      kept = z1;
    } else {
      sm::U128 part;
      for (int i = tid; i < vocab; i += kThreads) part = sm::add(part, mass_of(i));
      kept = block_sum(part, s);
    }
    if (p.top_p < 1.0f) {  // 2. top-p
      const sm::U128 threshold = sm::top_p_threshold(kept, p.top_p);
      const Boundary b =
          search_prefix<true>(vocab, rank_bits, rank_key_of, mass_of, true, 0, threshold, s);
      ok = ok && b.ok;
      n = b.count;
      kept = b.mass;
    }
    if (p.min_p > 0.0f) {  // 3. min-p
      const double log_min_p = sm::log_positive(static_cast<double>(p.min_p));
      unsigned int passing = 0;
      sm::U128 passing_mass;
      for (int i = tid; i < vocab; i += kThreads) {
        if (sm::passes_min_p(x[i], max, temperature, log_min_p)) {
          ++passing;
          passing_mass = sm::add(passing_mass, mass_of(i));
        }
      }
      passing = block_count(passing, s);
      passing_mass = block_sum(passing_mass, s);
      if (passing < n) {
        n = passing;
        kept = passing_mass;
      }
    }
    // 4-5. the draw: the first rank prefix whose mass exceeds t = floor(u53 * S / 2^53).
    const sm::U128 t = sm::draw_target(kept, sm::draw_bits53(p.seed, p.position, p.sample_index));
    const Boundary d = search_prefix<true>(vocab, rank_bits, rank_key_of, mass_of, true, 0,
                                           sm::add(t, 1ull), s);
    ok = ok && d.ok && d.count <= n;
    token = static_cast<int>(d.key & id_mask);
  }
  if (tid == 0) {
    out->token = ok ? token : -1;
    out->logprob = sm::logprob_from_gap(x[token], max, log_z1);
    out->status = SampleRowStatus::kOk;
  }
}

}  // namespace

cudaError_t launch_sample_rows(const float* logits, int32_t rows, int32_t vocab,
                               const SampleRowParams* params, SampleRowResult* out,
                               cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return cudaSuccess;
  const int id_bits = vocab > 1 ? sm::bit_length(static_cast<uint64_t>(vocab - 1)) : 1;
  sample_rows_kernel<<<rows, kThreads, 0, stream>>>(logits, vocab, id_bits, params, out);
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda
