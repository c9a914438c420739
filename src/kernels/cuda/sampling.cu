// Sampling on the device: every row of a logits matrix (rows, vocab) fp32, each with its own
// SampleRowParams, to the CPU sampler's result (token, logprob, top logprobs) bit for bit
// (kernels/sampling/sampler.h: the spec; kernels/sampling/sampler_math.h: the shared math).
// Test: build/tests/test_cuda --gtest_filter='CudaSampling*' (tests/cuda/cuda_sampling_test.cpp);
// it also prints the time per launch at vocab 128256, batch 1, 8 and 256.
//
// Why a row may be split over any number of blocks without changing a bit:
//   - every sum the spec takes over tokens (Z1, the kept masses, the top-p cumulative mass, the
//     inverse-CDF walk, the counts) is a sum of exact 128-bit fixed-point integers
//     (sampler_math.h): integer addition is associative and commutative, so per-block partial
//     sums merged by integer atomics or by a later pass equal the CPU's sequential loop,
//     whatever the partition into blocks, the visiting order or the atomics' order;
//   - the max is a min over unique integer rank keys, the same under any partition;
//   - the per-element values (d, exp, q, logprob, the min-p test) come from the same DETLLM_HD
//     functions as on the CPU, with __dadd_rn/__dmul_rn/__ddiv_rn (no contraction);
//   - every prefix of the rank order (logit desc, id asc) the spec needs — top-k, the top-p
//     boundary, the draw, the n-th best logprob — is "the smallest rank prefix whose count or
//     mass reaches a target": found from exact bucket sums, then by a radix select inside the
//     one bucket that holds its end. Which tokens share a bucket and which tokens a pass visits
//     change which work is done, never a sum or a comparison. No float atomics anywhere.
//
// The passes (ordinary launches in stream order, no grid barrier; B = blocks a row, chosen
// from the batch to fill the GPU, or forced for tests):
//   1. max (B per row): each block's smallest rank key and a NaN/+inf flag -> its BlockPart;
//      also zeroes the row's bucket histogram and list counters for pass 2 and 4. With one
//      block a row (B = 1: large batches) pass 2's block does this first, in the same launch.
//   2. histogram (B per row): the row's max from pass 1's parts; for every token its T = 1
//      mass (Z1), its mass at T, the min-p test, and its bucket (sampling_layout.cuh: a code of
//      the distance from the max in the rank order, 1728 buckets): a shared-memory histogram
//      of counts and masses (32-bit atomics carrying into the next word: sampling_block.cuh),
//      added to the row's global histogram by integer atomics (stored when B = 1); Z1 and the
//      min-p sums per block in its BlockPart.
//   3. plan (1 per row): Z1, log Z1; the histogram to inclusive prefix sums; from them the
//      buckets that can hold each boundary (top-k exactly; top-p and the draw as intervals, as
//      their targets depend on the masses found before them) and a lower bound of the n-th
//      best logprob (from the n-th rank token's bucket).
//   4. collect (B per row): the tokens of those buckets (rank key and mass) and the tokens with
//      logprob >= the bound, appended to the row's lists (integer atomics; any order).
//   5. finish (1 per row, sampling_finish.cu): each boundary's bucket from the prefix sums,
//      then the radix select (sampling_select.cuh) over the bucket's tokens from the list, with
//      the sums before the bucket as the start; the top logprobs selected from their list. A
//      bucket or list that did not fit (ties: one logit on thousands of tokens) is searched over
//      the whole vocabulary by the block instead: slower, the same bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/sampling_block.cuh"
#include "kernels/cuda/sampling_layout.cuh"
#include "kernels/sampling/sample_row.h"
#include "kernels/sampling/sampler_math.h"

namespace detllm::kernels::cuda {
namespace sampling {
namespace {

constexpr int kDefaultCandCapacity = 4096;
constexpr int kDefaultLpCapacity = 2048;
// The candidate lists of a whole call share this budget when the rows are few, so a flat row
// (a bucket of tens of thousands of near-equal tokens at the top-p or draw boundary) is still
// searched in its list and not over the whole row by one block. Any capacity gives the same
// bits; only the speed of such rows changes.
constexpr size_t kCandBudgetBytes = size_t{4} << 20;
constexpr int kMaxCandCapacity = 65536;

int default_cand_capacity(int32_t rows) {
  const size_t per_row = kCandBudgetBytes / sizeof(Candidate) /
                         static_cast<size_t>(std::max<int32_t>(rows, 1));
  return static_cast<int>(std::clamp<size_t>(per_row, kDefaultCandCapacity, kMaxCandCapacity));
}
// The same for the top-logprob lists (4-byte ids): a flat row puts thousands of tokens in the
// bucket of its n-th best logprob.
constexpr size_t kLpBudgetBytes = size_t{1} << 20;
int default_lp_capacity(int32_t rows) {
  const size_t per_row = kLpBudgetBytes / sizeof(unsigned int) /
                         static_cast<size_t>(std::max<int32_t>(rows, 1));
  return static_cast<int>(std::clamp<size_t>(per_row, kDefaultLpCapacity, kMaxCandCapacity));
}
// Tokens a block of a full-vocabulary pass gets at least, when the batch leaves SMs idle.
constexpr int kMinTokensPerBlock = 1024;

struct Chunk {
  int begin;
  int end;
};
// Block j's tokens of a row: contiguous chunks (any partition gives the same bits).
__device__ inline Chunk chunk_of(int vocab, int blocks, int j) {
  const int64_t size = (static_cast<int64_t>(vocab) + blocks - 1) / blocks;
  const int64_t begin = size * j < vocab ? size * j : vocab;
  const int64_t end = begin + size < vocab ? begin + size : vocab;
  return Chunk{static_cast<int>(begin), static_cast<int>(end)};
}

__device__ inline bool all_masked(unsigned long long best, int id_bits) {
  return (best >> id_bits) == sm::rank_value_key_neg_inf();
}

// ---- Pass 1 ----------------------------------------------------------------------------------

// The smallest rank key and the bad flag of block j's chunk, into its BlockPart (every thread
// gets them).
struct RowMax {
  unsigned long long best;
  unsigned int bad;
};
__device__ inline RowMax chunk_max(const float* x, int vocab, int id_bits, const Scratch& sc,
                                   int row, int j, Reduce& red) {
  const Chunk c = chunk_of(vocab, sc.blocks_per_row, j);
  unsigned int bad = 0;
  unsigned long long best = ~0ull;
  for (int i = c.begin + threadIdx.x; i < c.end; i += kThreads) {
    const float v = x[i];
    if (!(v < __int_as_float(0x7f800000))) bad = 1;  // NaN or +inf
    const unsigned long long k = sm::rank_key(v, static_cast<uint32_t>(i), id_bits);
    best = k < best ? k : best;
  }
  bad = block_count(bad, red);
  best = block_min(best, red);
  if (threadIdx.x == 0) {
    BlockPart& part = sc.parts[static_cast<size_t>(row) * sc.blocks_per_row + j];
    part.min_key = best;
    part.bad = bad;
    if (j == 0) {  // the lists of pass 4 start empty
      sc.counters[2 * row] = 0;
      sc.counters[2 * row + 1] = 0;
    }
  }
  return RowMax{best, bad};
}

// Rows spread over B > 1 blocks only (with one block a row, pass 2 does this itself).
__global__ void __launch_bounds__(kThreads)
    max_kernel(const float* __restrict__ logits, int vocab, int id_bits, Scratch sc) {
  __shared__ Reduce red;
  const int row = blockIdx.y, j = blockIdx.x, tid = threadIdx.x, blocks = sc.blocks_per_row;
  const size_t hist = static_cast<size_t>(row) * kBuckets;
  for (int b = j * kThreads + tid; b < kBuckets; b += blocks * kThreads) {
    sc.hist_count[hist + b] = 0;
    sc.hist_lo[hist + b] = 0;
    sc.hist_hi[hist + b] = 0;
  }
  const float* x = logits + static_cast<size_t>(row) * static_cast<size_t>(vocab);
  chunk_max(x, vocab, id_bits, sc, row, j, red);
}

// The row's smallest rank key and bad flag from pass 1's parts (every thread gets them).
__device__ inline RowMax row_max(const Scratch& sc, int row, Reduce& red) {
  unsigned long long best = ~0ull;
  unsigned int bad = 0;
  if (threadIdx.x < sc.blocks_per_row) {
    const BlockPart& part =
        sc.parts[static_cast<size_t>(row) * sc.blocks_per_row + threadIdx.x];
    best = part.min_key;
    bad = part.bad;
  }
  bad = block_count(bad, red);
  best = block_min(best, red);
  return RowMax{best, bad};
}

// ---- Pass 2 ----------------------------------------------------------------------------------

struct HistShared {
  unsigned int count[kBuckets];
  unsigned int mass_w0[kBuckets], mass_w1[kBuckets], mass_w2[kBuckets];  // atomic_add_mass96
  Reduce red;
};

__device__ inline void hist_add_mass(HistShared& s, int d, sm::U128 m) {
  atomic_add_mass96(&s.mass_w0[d], &s.mass_w1[d], &s.mass_w2[d], m);
}

__global__ void __launch_bounds__(kThreads)
    hist_kernel(const float* __restrict__ logits, int vocab, int id_bits,
                const SampleRowParams* __restrict__ params, Scratch sc) {
  __shared__ HistShared s;
  const int row = blockIdx.y, j = blockIdx.x, tid = threadIdx.x, lane = tid % 32;
  const float* x = logits + static_cast<size_t>(row) * static_cast<size_t>(vocab);
  // One block a row (large batches): pass 1 is this block's own first loop, and the histogram
  // is stored rather than added (no zeroing needed); else pass 1's parts.
  const bool whole_row = sc.blocks_per_row == 1;
  const RowMax m =
      whole_row ? chunk_max(x, vocab, id_bits, sc, row, 0, s.red) : row_max(sc, row, s.red);
  if (m.bad != 0 || all_masked(m.best, id_bits)) return;  // the plan reports it
  const float max = x[m.best & ((1ull << id_bits) - 1)];
  const uint32_t vkey_max = static_cast<uint32_t>(m.best >> id_bits);
  const SampleRowParams p = params[row];
  const bool hist = row_needs_hist(p);
  const bool sampled = p.temperature != 0.0f;
  const double temperature = static_cast<double>(p.temperature);
  const bool min_p = sampled && p.min_p > 0.0f;
  const double log_min_p = min_p ? sm::log_positive(static_cast<double>(p.min_p)) : 0.0;
  if (hist) {
    for (int d = tid; d < kBuckets; d += kThreads) {
      s.count[d] = 0;
      s.mass_w0[d] = 0;
      s.mass_w1[d] = 0;
      s.mass_w2[d] = 0;
    }
  }
  __syncthreads();
  const Chunk c = chunk_of(vocab, sc.blocks_per_row, j);
  sm::U128 z1, min_p_mass;
  unsigned int n_min_p = 0;
  for (int base = c.begin; base < c.end; base += kThreads) {  // uniform trip count
    const int i = base + tid;
    const bool in = i < c.end;
    int digit = -1;  // lanes without a token match only each other
    unsigned long long q = 0;
    if (in) {
      const float v = x[i];
      const unsigned long long q1 = mass_t1(v, max);
      z1 = sm::add(z1, q1);
      if (hist) {
        digit = bucket_of_rel(sm::rank_value_key(v) - vkey_max);
        if (sampled) q = p.temperature == 1.0f ? q1 : sm::mass(v, max, temperature);
        if (min_p && sm::passes_min_p(v, max, temperature, log_min_p)) {
          ++n_min_p;
          min_p_mass = sm::add(min_p_mass, q);
        }
      }
    }
    if (!hist) continue;
    // Warp aggregation as in the radix select: few distinct buckets in a warp -> one butterfly
    // and one atomic per bucket; many -> one atomic per lane. Exact either way.
    const unsigned int peers = __match_any_sync(kFull, static_cast<unsigned int>(digit));
    const bool leader = in && lane == __ffs(peers) - 1;
    const unsigned int leaders = __ballot_sync(kFull, leader);
    if (!sampled) {
      if (leader) atomicAdd(&s.count[digit], static_cast<unsigned int>(__popc(peers)));
    } else if (__popc(leaders) <= 4) {
      for (unsigned int rest = leaders; rest != 0; rest &= rest - 1) {
        const int first = __ffs(rest) - 1;
        const int d = __shfl_sync(kFull, digit, first);
        sm::U128 sum = sm::u128(in && digit == d ? q : 0ull);
        for (int offset = 16; offset > 0; offset >>= 1)
          sum = sm::add(sum, shfl_xor_u128(sum, offset));
        if (lane == first) {
          atomicAdd(&s.count[d], static_cast<unsigned int>(__popc(peers)));
          hist_add_mass(s, d, sum);
        }
      }
    } else if (in) {
      atomicAdd(&s.count[digit], 1u);
      hist_add_mass(s, digit, sm::u128(q));
    }
  }
  z1 = block_sum(z1, s.red);
  min_p_mass = block_sum(min_p_mass, s.red);
  n_min_p = block_count(n_min_p, s.red);  // (its __syncthreads also ends the histogram)
  if (tid == 0) {
    BlockPart& part = sc.parts[static_cast<size_t>(row) * sc.blocks_per_row + j];
    part.z1_lo = z1.lo;
    part.z1_hi = z1.hi;
    part.n_min_p = n_min_p;
    part.min_p_lo = min_p_mass.lo;
    part.min_p_hi = min_p_mass.hi;
  }
  if (!hist) return;
  const size_t o = static_cast<size_t>(row) * kBuckets;
  for (int d = tid; d < kBuckets; d += kThreads) {
    const unsigned int n = s.count[d];
    const sm::U128 mass = mass96(s.mass_w0[d], s.mass_w1[d], s.mass_w2[d]);
    if (whole_row) {
      sc.hist_count[o + d] = n;
      sc.hist_lo[o + d] = mass.lo;
      sc.hist_hi[o + d] = mass.hi;
      continue;
    }
    if (n == 0) continue;
    atomicAdd(&sc.hist_count[o + d], n);  // global 64-bit atomics are native (not CAS loops)
    const unsigned long long old = atomicAdd(&sc.hist_lo[o + d], mass.lo);
    const unsigned long long hi = mass.hi + (old + mass.lo < old ? 1u : 0u);
    if (hi != 0) atomicAdd(&sc.hist_hi[o + d], hi);
  }
}

// ---- Pass 3 ----------------------------------------------------------------------------------

struct PlanShared {
  Reduce red;
  int found;
};

__global__ void __launch_bounds__(kThreads)
    plan_kernel(const float* __restrict__ logits, int vocab, int id_bits,
                const SampleRowParams* __restrict__ params, Scratch sc) {
  __shared__ PlanShared s;
  const int row = blockIdx.x, tid = threadIdx.x;
  const RowMax m = row_max(sc, row, s.red);
  RowPlan& plan = sc.plans[row];
  if (m.bad != 0 || all_masked(m.best, id_bits)) {
    if (tid == 0) {
      plan.status = m.bad != 0 ? SampleRowStatus::kNonFiniteLogit : SampleRowStatus::kAllMasked;
    }
    return;
  }
  const float* x = logits + static_cast<size_t>(row) * static_cast<size_t>(vocab);
  const int argmax = static_cast<int>(m.best & ((1ull << id_bits) - 1));
  const float max = x[argmax];
  const uint32_t vkey_max = static_cast<uint32_t>(m.best >> id_bits);
  const SampleRowParams p = params[row];

  // Z1 and the min-p sums from pass 2's parts.
  sm::U128 z1, min_p_mass;
  unsigned int n_min_p = 0;
  if (tid < sc.blocks_per_row) {
    const BlockPart& part = sc.parts[static_cast<size_t>(row) * sc.blocks_per_row + tid];
    z1 = u128_of(part.z1_lo, part.z1_hi);
    min_p_mass = u128_of(part.min_p_lo, part.min_p_hi);
    n_min_p = part.n_min_p;
  }
  z1 = block_sum(z1, s.red);
  min_p_mass = block_sum(min_p_mass, s.red);
  n_min_p = block_count(n_min_p, s.red);
  const double log_z1 = sm::log_normalizer(z1);

  int n_intervals = 0;
  int interval_lo[kMaxIntervals] = {}, interval_hi[kMaxIntervals] = {};
  int collect_lp = 0;
  float lp_bound = 0.0f;
  if (row_needs_hist(p)) {
    // The histogram to inclusive prefix sums, in place: thread t owns kPer consecutive buckets.
    constexpr int kPer = (kBuckets + kThreads - 1) / kThreads;
    const size_t o = static_cast<size_t>(row) * kBuckets;
    unsigned int count[kPer];
    sm::U128 mass[kPer];
    CountMass own{0, sm::U128{}};
    for (int k = 0; k < kPer; ++k) {
      const int b = tid * kPer + k;
      count[k] = b < kBuckets ? sc.hist_count[o + b] : 0u;
      mass[k] = b < kBuckets ? u128_of(sc.hist_lo[o + b], sc.hist_hi[o + b]) : sm::U128{};
      own.count += count[k];
      own.mass = sm::add(own.mass, mass[k]);
    }
    CountMass run = block_exclusive_scan(own, s.red);
    for (int k = 0; k < kPer; ++k) {
      const int b = tid * kPer + k;
      run.count += count[k];
      run.mass = sm::add(run.mass, mass[k]);
      if (b < kBuckets) {
        sc.hist_count[o + b] = run.count;
        sc.hist_lo[o + b] = run.mass.lo;
        sc.hist_hi[o + b] = run.mass.hi;
      }
    }
    __syncthreads();  // the block's global writes are visible to it after the barrier
    const RowHist h = row_hist(sc, row);
    // Keeps the bucket interval [a, b] when its tokens fit in the list with those kept so far.
    unsigned int listed = 0;
    const auto keep = [&](int a, int b) {
      if (a < 0 || b < a || n_intervals == kMaxIntervals) return;
      const unsigned int n = h.count_through(b) - h.count_through(a - 1);
      if (listed + n > static_cast<unsigned int>(sc.cand_capacity)) return;
      listed += n;
      interval_lo[n_intervals] = a;
      interval_hi[n_intervals] = b;
      ++n_intervals;
    };
    if (p.temperature != 0.0f) {
      // The kept mass Z after top-k, S before the draw: known exactly, or bounded by the
      // bucket that holds the boundary they depend on (the finish pass finds the exact value;
      // these intervals only decide which tokens it gets in its list).
      const sm::U128 total = h.mass_through(kBuckets - 1);
      sm::U128 z_lo = total, z_hi = total;
      if (p.top_k > 0 && p.top_k < vocab) {
        const int b = find_bucket(h, false, static_cast<unsigned int>(p.top_k), sm::U128{},
                                  s.found);
        if (b >= 0) {
          z_lo = h.mass_through(b - 1);
          z_hi = h.mass_through(b);
          if (z_lo < z_hi) keep(b, b);  // (a bucket of zero mass needs no refinement)
        }
      }
      sm::U128 s_lo = z_lo, s_hi = z_hi;
      if (p.top_p < 1.0f) {
        const sm::U128 t_lo = sm::top_p_threshold(z_lo, p.top_p);
        const sm::U128 t_hi = sm::top_p_threshold(z_hi, p.top_p);
        const int a = find_bucket(h, true, 0, t_lo, s.found);
        const int b = find_bucket(h, true, 0, t_hi, s.found);
        keep(a, b);
        s_lo = t_lo;
        if (b >= 0) s_hi = h.mass_through(b);
      }
      if (p.min_p > 0.0f) {  // S = min(C_n_p, the min-p prefix's mass)
        s_lo = min(s_lo, min_p_mass);
        s_hi = min(s_hi, min_p_mass);
      }
      const uint64_t u53 = sm::draw_bits53(p.seed, p.position, p.sample_index);
      const int a = find_bucket(h, true, 0, sm::add(sm::draw_target(s_lo, u53), 1ull), s.found);
      const int b = find_bucket(h, true, 0, sm::add(sm::draw_target(s_hi, u53), 1ull), s.found);
      keep(a, b);
    }
    const int n_top = p.n_logprobs < vocab ? p.n_logprobs : vocab;
    if (n_top > 0) {
      // The n-th rank token is in bucket b, so its logit >= the smallest logit of b and its
      // logprob (L*) >= that logit's: every token of the top list has logprob >= the bound.
      const int b = find_bucket(h, false, static_cast<unsigned int>(n_top), sm::U128{}, s.found);
      if (b >= 0) {
        const uint64_t vkey_lowest = vkey_max + bucket_rel_lo(b + 1) - 1;
        const float x_lowest = vkey_lowest >= sm::rank_value_key_neg_inf()
                                   ? -__int_as_float(0x7f800000)
                                   : float_of_value_key(static_cast<uint32_t>(vkey_lowest));
        collect_lp = 1;
        lp_bound = sm::logprob_from_gap(x_lowest, max, log_z1);
      }
    }
  }
  if (tid == 0) {
    plan.status = SampleRowStatus::kOk;
    plan.argmax = argmax;
    plan.max = max;
    plan.collect_lp = collect_lp;
    plan.lp_bound = lp_bound;
    plan.n_intervals = n_intervals;
    for (int k = 0; k < kMaxIntervals; ++k) {
      plan.interval_lo[k] = interval_lo[k];
      plan.interval_hi[k] = interval_hi[k];
    }
    plan.log_z1 = log_z1;
    plan.z1_lo = z1.lo;
    plan.z1_hi = z1.hi;
    plan.n_min_p = n_min_p;
    plan.min_p_lo = min_p_mass.lo;
    plan.min_p_hi = min_p_mass.hi;
  }
}

// ---- Pass 4 ----------------------------------------------------------------------------------

// Appends this lane's item (when `in`) to a row list: one atomic per warp. Returns the slot
// (>= capacity: counted, not stored).
__device__ inline unsigned int warp_append(bool in, unsigned int* counter) {
  const int lane = threadIdx.x % 32;
  const unsigned int lanes = __ballot_sync(kFull, in);
  unsigned int base = 0;
  if (lanes != 0 && lane == __ffs(lanes) - 1) base = atomicAdd(counter, __popc(lanes));
  base = __shfl_sync(kFull, base, lanes != 0 ? __ffs(lanes) - 1 : 0);
  return base + static_cast<unsigned int>(__popc(lanes & ((1u << lane) - 1)));
}

__global__ void __launch_bounds__(kThreads)
    collect_kernel(const float* __restrict__ logits, int vocab, int id_bits,
                   const SampleRowParams* __restrict__ params, Scratch sc) {
  const int row = blockIdx.y, j = blockIdx.x, tid = threadIdx.x;
  const RowPlan& plan = sc.plans[row];
  if (plan.status != SampleRowStatus::kOk) return;
  const int n_intervals = plan.n_intervals;
  const bool collect_lp = plan.collect_lp != 0;
  if (n_intervals == 0 && !collect_lp) return;
  int lo[kMaxIntervals], hi[kMaxIntervals];
  for (int k = 0; k < kMaxIntervals; ++k) {
    lo[k] = k < n_intervals ? plan.interval_lo[k] : 1;
    hi[k] = k < n_intervals ? plan.interval_hi[k] : 0;
  }
  const float max = plan.max;
  const double log_z1 = plan.log_z1;
  const float lp_bound = plan.lp_bound;
  const uint32_t vkey_max = sm::rank_value_key(max);
  const double temperature = static_cast<double>(params[row].temperature);
  const float* x = logits + static_cast<size_t>(row) * static_cast<size_t>(vocab);
  unsigned int* counters = sc.counters + 2 * row;
  Candidate* cands = sc.cands + static_cast<size_t>(row) * sc.cand_capacity;
  unsigned int* lp_ids = sc.lp_ids + static_cast<size_t>(row) * sc.lp_capacity;
  const Chunk c = chunk_of(vocab, sc.blocks_per_row, j);
  for (int base = c.begin; base < c.end; base += kThreads) {  // uniform trip count
    const int i = base + tid;
    float v = 0.0f;
    bool in = false, in_lp = false;
    if (i < c.end) {
      v = x[i];
      const int d = bucket_of_rel(sm::rank_value_key(v) - vkey_max);
      for (int k = 0; k < kMaxIntervals; ++k) in = in || (lo[k] <= d && d <= hi[k]);
      in_lp = collect_lp && sm::logprob_from_gap(v, max, log_z1) >= lp_bound;
    }
    if (n_intervals > 0) {
      const unsigned int slot = warp_append(in, &counters[0]);
      if (in && slot < static_cast<unsigned int>(sc.cand_capacity)) {
        cands[slot] = Candidate{sm::rank_key(v, static_cast<uint32_t>(i), id_bits),
                                sm::mass(v, max, temperature)};
      }
    }
    if (collect_lp) {
      const unsigned int slot = warp_append(in_lp, &counters[1]);
      if (in_lp && slot < static_cast<unsigned int>(sc.lp_capacity))
        lp_ids[slot] = static_cast<unsigned int>(i);
    }
  }
}

constexpr size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}

}  // namespace

size_t scratch_bytes(int rows, int blocks_per_row, int cand_capacity, int lp_capacity) {
  const size_t r = static_cast<size_t>(rows);
  return align256(sizeof(BlockPart) * r * static_cast<size_t>(blocks_per_row)) +
         align256(sizeof(RowPlan) * r) + align256(sizeof(unsigned int) * r * kBuckets) +
         2 * align256(sizeof(unsigned long long) * r * kBuckets) +
         align256(sizeof(unsigned int) * 2 * r) +
         align256(sizeof(Candidate) * r * static_cast<size_t>(cand_capacity)) +
         align256(sizeof(unsigned int) * r * static_cast<size_t>(lp_capacity));
}

Scratch carve_scratch(void* base, int rows, int blocks_per_row, int cand_capacity,
                      int lp_capacity) {
  const size_t r = static_cast<size_t>(rows);
  char* p = static_cast<char*>(base);
  const auto take = [&p](size_t bytes) {
    char* q = p;
    p += align256(bytes);
    return q;
  };
  Scratch s;
  s.parts = reinterpret_cast<BlockPart*>(
      take(sizeof(BlockPart) * r * static_cast<size_t>(blocks_per_row)));
  s.plans = reinterpret_cast<RowPlan*>(take(sizeof(RowPlan) * r));
  s.hist_count = reinterpret_cast<unsigned int*>(take(sizeof(unsigned int) * r * kBuckets));
  s.hist_lo =
      reinterpret_cast<unsigned long long*>(take(sizeof(unsigned long long) * r * kBuckets));
  s.hist_hi =
      reinterpret_cast<unsigned long long*>(take(sizeof(unsigned long long) * r * kBuckets));
  s.counters = reinterpret_cast<unsigned int*>(take(sizeof(unsigned int) * 2 * r));
  s.cands = reinterpret_cast<Candidate*>(
      take(sizeof(Candidate) * r * static_cast<size_t>(cand_capacity)));
  s.lp_ids = reinterpret_cast<unsigned int*>(
      take(sizeof(unsigned int) * r * static_cast<size_t>(lp_capacity)));
  s.blocks_per_row = blocks_per_row;
  s.cand_capacity = cand_capacity;
  s.lp_capacity = lp_capacity;
  return s;
}

}  // namespace sampling

SampleRowsPlan plan_sample_rows(int32_t rows, int32_t vocab, const SampleRowsConfig& config,
                                int sm_count) {
  SampleRowsPlan plan;
  if (config.blocks_per_row > 0) {
    plan.blocks_per_row = std::min(config.blocks_per_row, sampling::kMaxBlocksPerRow);
  } else {
    // One block a row once the rows alone fill the SMs (pass 1 then fuses into pass 2: one
    // read of the logits fewer); below that, enough blocks to fill every SM twice, none with
    // fewer than kMinTokensPerBlock tokens.
    const int64_t sms = std::max(sm_count, 1);
    const int64_t fill = rows >= sms ? 1 : (2 * sms + rows - 1) / std::max<int64_t>(rows, 1);
    const int64_t useful =
        (static_cast<int64_t>(vocab) + sampling::kMinTokensPerBlock - 1) /
        sampling::kMinTokensPerBlock;
    plan.blocks_per_row = static_cast<int>(
        std::clamp<int64_t>(std::min(fill, useful), 1, sampling::kMaxBlocksPerRow));
  }
  plan.cand_capacity = config.candidate_capacity >= 0 ? config.candidate_capacity
                                                      : sampling::default_cand_capacity(rows);
  plan.lp_capacity = config.candidate_capacity >= 0 ? config.candidate_capacity
                                                    : sampling::default_lp_capacity(rows);
  plan.scratch_bytes = sampling::scratch_bytes(std::max(rows, 1), plan.blocks_per_row,
                                               plan.cand_capacity, plan.lp_capacity);
  return plan;
}

cudaError_t launch_sample_rows(const float* logits, int32_t rows, int32_t vocab,
                               const SampleRowParams* params, SampleRowResult* out,
                               const SampleRowsPlan& plan, void* scratch, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return cudaSuccess;
  namespace s = sampling;
  const int id_bits = vocab > 1 ? s::sm::bit_length(static_cast<uint64_t>(vocab - 1)) : 1;
  const s::Scratch sc =
      s::carve_scratch(scratch, rows, plan.blocks_per_row, plan.cand_capacity, plan.lp_capacity);
  const dim3 wide(static_cast<unsigned>(plan.blocks_per_row), static_cast<unsigned>(rows));
  const auto mark = [&](int k) {
    if (plan.pass_events != nullptr) cudaEventRecord(plan.pass_events[k], stream);
  };
  mark(0);
  if (plan.blocks_per_row > 1)  // (one block a row: pass 2 finds the max itself)
    s::max_kernel<<<wide, s::kThreads, 0, stream>>>(logits, vocab, id_bits, sc);
  mark(1);
  s::hist_kernel<<<wide, s::kThreads, 0, stream>>>(logits, vocab, id_bits, params, sc);
  mark(2);
  s::plan_kernel<<<rows, s::kThreads, 0, stream>>>(logits, vocab, id_bits, params, sc);
  mark(3);
  s::collect_kernel<<<wide, s::kThreads, 0, stream>>>(logits, vocab, id_bits, params, sc);
  mark(4);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const cudaError_t f = s::launch_finish(logits, rows, vocab, id_bits, params, sc, out, stream);
  mark(5);
  return f;
}

}  // namespace detllm::kernels::cuda
