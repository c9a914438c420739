// The device sampler's radix select (sampling_finish.cu): over a set of tokens, each with a
// unique integer key and an exact mass, one block finds the end of the smallest key-ordered
// prefix whose count or mass reaches a target, 8 key bits a pass from the top. Each pass is a
// shared-memory histogram of the counts and exact 128-bit masses of the tokens that share the
// key prefix found so far (integer sums: any visiting order and any warp grouping give the same
// bucket totals), so the result is the one the CPU's sequential walk gives.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/sampling_block.cuh"

namespace detllm::kernels::cuda::sampling {

// A pass over the whole visit set also collects the tokens of the current prefix when they are
// at most this many; the later passes then visit only those.
constexpr int kMaxCandidates = 4096;
// Digit groups per warp up to which a butterfly per group beats one atomic per lane.
constexpr int kButterflyGroups = 4;

struct SelectShared {
  unsigned int count[256];
  unsigned int mass_w0[256], mass_w1[256], mass_w2[256];  // atomic_add_mass96's words
  int chosen;  // search state, written by one lane of warp 0
  unsigned int acc_count;
  unsigned long long acc_mass_lo, acc_mass_hi;
  unsigned int bucket_count;
  unsigned long long bucket_mass_lo, bucket_mass_hi;
  unsigned long long found_key;
  int n_cand;
  int cand[kMaxCandidates];  // indices into the source
};

struct KeyOf {
  bool valid;
  unsigned long long key;
};

// The end of the prefix: its last key and the count and mass of the rank prefix through it
// (start's acc included).
struct Boundary {
  bool ok;
  unsigned long long key;
  unsigned int count;
  sm::U128 mass;
};

// Where a search starts: every valid token of the source has (key >> hi) == prefix; the tokens
// before the set in the order have acc_count and acc_mass; set_count >= the number of valid
// tokens (exact or an upper bound).
struct SearchStart {
  unsigned long long prefix;
  int hi;
  unsigned int acc_count;
  sm::U128 acc_mass;
  unsigned int set_count;
};

// bucket d's exact mass += m.
__device__ inline void add_mass(SelectShared& s, unsigned int d, sm::U128 m) {
  atomic_add_mass96(&s.mass_w0[d], &s.mass_w1[d], &s.mass_w2[d], m);
}
__device__ inline sm::U128 bucket_mass(const SelectShared& s, unsigned int d) {
  return mass96(s.mass_w0[d], s.mass_w1[d], s.mass_w2[d]);
}

// Warp 0: the first digit (of n_buckets) at which the running (count or mass) from the shared
// acc reaches the target; writes chosen (-1: none), the digit's bucket and the acc before it.
__device__ inline void choose_digit(SelectShared& s, unsigned int n_buckets, bool by_mass,
                                    unsigned int target_count, sm::U128 target_mass) {
  const int lane = threadIdx.x % 32;
  constexpr int kPer = 256 / 32;
  const unsigned int d0 = static_cast<unsigned int>(lane) * kPer;
  CountMass own{0, sm::U128{}};
  for (int k = 0; k < kPer; ++k) {
    const unsigned int d = d0 + static_cast<unsigned int>(k);
    if (d < n_buckets) {
      own.count += s.count[d];
      own.mass = sm::add(own.mass, bucket_mass(s, d));
    }
  }
  CountMass acc = warp_scan(own).excl;
  acc.count += s.acc_count;
  acc.mass = sm::add(acc.mass, u128_of(s.acc_mass_lo, s.acc_mass_hi));
  int found = -1;
  unsigned int found_count = 0;
  sm::U128 found_mass;
  for (int k = 0; k < kPer && found < 0; ++k) {
    const unsigned int d = d0 + static_cast<unsigned int>(k);
    if (d >= n_buckets) break;
    const sm::U128 bucket = bucket_mass(s, d);
    const unsigned int c = acc.count + s.count[d];
    const sm::U128 m = sm::add(acc.mass, bucket);
    if (by_mass ? m >= target_mass : c >= target_count) {
      found = static_cast<int>(d);
      found_count = s.count[d];
      found_mass = bucket;
    } else {
      acc.count = c;
      acc.mass = m;
    }
  }
  const unsigned int lanes = __ballot_sync(kFull, found >= 0);
  __syncwarp();  // every lane has read the shared state before one lane writes it
  if (lanes == 0) {
    if (lane == 0) s.chosen = -1;
  } else if (lane == __ffs(lanes) - 1) {
    s.chosen = found;
    s.bucket_count = found_count;
    s.bucket_mass_lo = found_mass.lo;
    s.bucket_mass_hi = found_mass.hi;
    s.acc_count = acc.count;
    s.acc_mass_lo = acc.mass.lo;
    s.acc_mass_hi = acc.mass.hi;
  }
}

// Source: int size() const; KeyOf key(int j) const; unsigned long long mass(int j) const
// (mass only when kWithMass). Every thread of the block calls it with the same
// arguments. The targets count from the start of the order (start.acc included).
template <bool kWithMass, typename Source>
__device__ Boundary search_prefix(const Source& src, SearchStart start, bool by_mass,
                                  unsigned int target_count, sm::U128 target_mass,
                                  SelectShared& s) {
  const int tid = threadIdx.x, lane = tid % 32;
  unsigned long long prefix = start.prefix;
  int hi = start.hi;  // bits above `hi` are fixed to `prefix`
  if (tid == 0) {
    s.acc_count = start.acc_count;
    s.acc_mass_lo = start.acc_mass.lo;
    s.acc_mass_hi = start.acc_mass.hi;
  }
  // The tokens a pass visits: the source, or (use_list) the candidates collected by an
  // earlier pass — exactly the tokens of the prefix then, a superset of the current prefix's.
  // Which tokens are visited changes no sum: the others are outside the prefix.
  bool use_list = false;
  unsigned int prefix_count = start.set_count;  // >= the valid tokens of the prefix
  while (true) {
    const bool collect = !use_list && prefix_count <= static_cast<unsigned int>(kMaxCandidates);
    const int n_visit = use_list ? s.n_cand : src.size();
    const int width = hi < 8 ? hi : 8;
    const int shift = hi - width;
    const unsigned int n_buckets = 1u << width;
    for (int d = tid; d < 256; d += kThreads) {
      s.count[d] = 0;
      s.mass_w0[d] = 0;
      s.mass_w1[d] = 0;
      s.mass_w2[d] = 0;
    }
    if (collect && tid == 0) s.n_cand = 0;  // (read by no one in a pass that collects)
    __syncthreads();
    for (int base = 0; base < n_visit; base += kThreads) {
      const int j = base + tid < n_visit ? (use_list ? s.cand[base + tid] : base + tid) : -1;
      bool in = false;
      unsigned int digit = 0xffffffffu;  // lanes outside the prefix match only each other
      unsigned long long q = 0;
      if (j >= 0) {
        const KeyOf k = src.key(j);
        if (k.valid && (k.key >> hi) == prefix) {
          in = true;
          if (collect) s.cand[atomicAdd(&s.n_cand, 1)] = j;
          digit = static_cast<unsigned int>(k.key >> shift) & (n_buckets - 1);
          if constexpr (kWithMass) q = src.mass(j);
        }
      }
      if (__ballot_sync(kFull, in) == 0) continue;
      // Warp aggregation (exact, order-free integer sums): a warp whose tokens share few digits
      // sums each digit's masses by one butterfly and adds them with one atomic; a warp of many
      // distinct digits adds each lane's own.
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
    if (tid < 32) choose_digit(s, n_buckets, by_mass, target_count, target_mass);
    __syncthreads();
    const int chosen = s.chosen;
    const unsigned int bucket_count = s.bucket_count;
    use_list = use_list || collect;
    prefix_count = bucket_count;
    if (chosen < 0 || bucket_count == 0) {
      __syncthreads();  // everyone has read chosen before the next search writes it
      return Boundary{false, 0, 0, sm::U128{}};
    }
    prefix = (prefix << width) | static_cast<unsigned long long>(chosen);
    hi = shift;
    if (bucket_count == 1 || hi == 0) {
      unsigned long long key = prefix;
      if (hi > 0) {  // the bucket's only token: find its low bits
        const int n_find = use_list ? s.n_cand : src.size();
        for (int i = tid; i < n_find; i += kThreads) {
          const KeyOf k = src.key(use_list ? s.cand[i] : i);
          if (k.valid && (k.key >> hi) == prefix) s.found_key = k.key;
        }
        __syncthreads();
        key = s.found_key;
      }
      const Boundary b{true, key, s.acc_count + s.bucket_count,
                       sm::add(u128_of(s.acc_mass_lo, s.acc_mass_hi),
                               u128_of(s.bucket_mass_lo, s.bucket_mass_hi))};
      __syncthreads();  // the shared state is read by everyone before it is reused
      return b;
    }
    // the next pass clears the histogram after a __syncthreads (above)
  }
}

}  // namespace detllm::kernels::cuda::sampling
