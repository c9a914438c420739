// The device sampler's shared vocabulary (sampling.cu, sampling_finish.cu): the coarse buckets
// of the rank order that the full-vocabulary passes histogram, the per-call scratch in global
// memory, and the per-row plan. How the passes use them: sampling.cu's file comment.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sampling/sample_row.h"
#include "kernels/sampling/sampler_math.h"

namespace detllm::kernels::cuda::sampling {

namespace sm = ::detllm::sampler_math;

constexpr int kThreads = 512;  // every sampling kernel's block
constexpr int kWarps = kThreads / 32;
constexpr int kMaxBlocksPerRow = kThreads;  // a block reduces the row's partials one a thread

// ---- Coarse buckets of the rank order --------------------------------------------------------
// A token's bucket is a function of rel = rank_value_key(x) - rank_value_key(max) (>= 0; the
// float bits distance from the row's max in the rank order): rel itself below 2^kSubBits, above
// that a floating-point-like code of rel with kSubBits bits of mantissa (bit length L, the next
// kSubBits bits). The code is non-decreasing in the rank key, so every bucket is a contiguous
// range of the rank order: fine next to the max (where the mass is), 1/64 of the distance
// further down. Which tokens share a bucket changes no bit (the sums are exact integers); it
// only decides how many tokens the refinement visits.
constexpr int kSubBits = 6;
constexpr int kBuckets = (33 - kSubBits) << kSubBits;  // 1728: rel up to 2^32 - 1

__device__ inline int bucket_of_rel(uint32_t rel) {
  if (rel < (1u << kSubBits)) return static_cast<int>(rel);
  const int length = 32 - __clz(rel);  // >= kSubBits + 1
  return ((length - kSubBits) << kSubBits) |
         static_cast<int>((rel >> (length - kSubBits - 1)) & ((1u << kSubBits) - 1));
}
// The smallest rel of bucket b (b < kBuckets); bucket_rel_lo(kBuckets) = 2^32.
__device__ inline uint64_t bucket_rel_lo(int b) {
  if (b < (1 << kSubBits)) return static_cast<uint64_t>(b);
  const int e = b >> kSubBits;  // >= 1
  const uint64_t mant = static_cast<uint64_t>(b & ((1 << kSubBits) - 1));
  return ((uint64_t{1} << kSubBits) | mant) << (e - 1);
}

// The rank keys (sampler_math.h rank_key) of bucket b: [lo, hi], every id included.
struct KeyRange {
  uint64_t lo;
  uint64_t hi;
};
__device__ inline KeyRange bucket_keys(int b, uint32_t vkey_max, int id_bits) {
  const uint64_t lo = vkey_max + bucket_rel_lo(b);
  uint64_t hi = vkey_max + bucket_rel_lo(b + 1) - 1;
  if (hi > 0xffffffffull) hi = 0xffffffffull;
  return KeyRange{lo << id_bits, (hi << id_bits) | ((uint64_t{1} << id_bits) - 1)};
}

// The float whose rank_value_key is k (the largest of +0/-0 for the zero key), for bounds.
__device__ inline float float_of_value_key(uint32_t k) {
  const uint32_t ascending = ~k;
  const uint32_t bits = (ascending & 0x80000000u) ? (ascending & 0x7fffffffu) : ~ascending;
  return __uint_as_float(bits);
}

// ---- Scratch in global memory (one call; every region reset by the first pass) ---------------
// Per row r and block j of the row (B blocks a row):
//   parts    (rows, B)         BlockPart, each written by its block alone
//   plans    (rows)            RowPlan, written by the plan pass
//   hist     (rows, kBuckets)  count, mass lo, mass hi: zeroed by pass 1, summed by pass 2
//                              with integer atomics, made inclusive prefix sums by the plan
//   counters (rows, 2)         candidates and logprob candidates appended (zeroed by pass 1)
//   cands    (rows, cap)       Candidate: the tokens of the plan's buckets (appended by pass 4)
//   lp_ids   (rows, lp_cap)    token ids with logprob >= the plan's bound (pass 4)
struct BlockPart {
  unsigned long long min_key;  // smallest rank key of the block's tokens (pass 1)
  unsigned int bad;            // 1: a NaN or +inf logit (pass 1)
  unsigned int n_min_p;        // tokens passing min-p (pass 2)
  unsigned long long z1_lo, z1_hi;          // sum of T = 1 masses (pass 2)
  unsigned long long min_p_lo, min_p_hi;    // sum of the min-p passing tokens' masses (pass 2)
};

constexpr int kMaxIntervals = 3;  // top-k, top-p, draw

struct RowPlan {
  SampleRowStatus status;
  int argmax;
  float max;
  int collect_lp;  // 1: lp_ids holds every token with logprob >= lp_bound (when it fit)
  float lp_bound;
  int n_intervals;                        // bucket intervals whose tokens are in cands
  int interval_lo[kMaxIntervals];         // inclusive bucket indices
  int interval_hi[kMaxIntervals];
  double log_z1;
  unsigned long long z1_lo, z1_hi;
  unsigned int n_min_p;
  unsigned long long min_p_lo, min_p_hi;
};

struct Candidate {
  unsigned long long key;   // rank key
  unsigned long long mass;  // at the row's temperature
};

struct Scratch {
  BlockPart* parts;
  RowPlan* plans;
  unsigned int* hist_count;
  unsigned long long* hist_lo;
  unsigned long long* hist_hi;
  unsigned int* counters;  // (rows, 2): [0] candidates, [1] logprob candidates
  Candidate* cands;
  unsigned int* lp_ids;
  int blocks_per_row;
  int cand_capacity;
  int lp_capacity;
};

// Carves `base` (>= scratch_bytes(...) bytes, 256-byte aligned) into the regions above.
size_t scratch_bytes(int rows, int blocks_per_row, int cand_capacity, int lp_capacity);
Scratch carve_scratch(void* base, int rows, int blocks_per_row, int cand_capacity,
                      int lp_capacity);

// The last pass (sampling_finish.cu): one block a row resolves every boundary and writes out.
cudaError_t launch_finish(const float* logits, int rows, int vocab, int id_bits,
                          const SampleRowParams* params, const Scratch& s, SampleRowResult* out,
                          cudaStream_t stream);

// A row's inclusive prefix sums over the buckets (after the plan pass): count and mass of
// the rank order through bucket b.
struct RowHist {
  const unsigned int* count;
  const unsigned long long* lo;
  const unsigned long long* hi;
  __device__ unsigned int count_through(int b) const { return b < 0 ? 0u : count[b]; }
  __device__ sm::U128 mass_through(int b) const {
    return b < 0 ? sm::U128{} : sm::U128{lo[b], hi[b]};
  }
};
__device__ inline RowHist row_hist(const Scratch& s, int row) {
  const size_t o = static_cast<size_t>(row) * kBuckets;
  return RowHist{s.hist_count + o, s.hist_lo + o, s.hist_hi + o};
}

// sm::mass(x, max, 1.0) without the division: d / 1.0 == d exactly in IEEE arithmetic (also
// for -inf), so the bits are the same and the software double division is saved.
__device__ inline unsigned long long mass_t1(float x, float max) {
  return sm::mass_of_weight(sm::exp_nonpositive(sm::logit_gap(x, max)));
}

// A row's per-call flags, the same in every pass.
__device__ inline bool row_needs_hist(const SampleRowParams& p) {
  return p.temperature != 0.0f || p.n_logprobs > 0;
}

__device__ inline sm::U128 u128_of(unsigned long long lo, unsigned long long hi) {
  sm::U128 r;
  r.lo = lo;
  r.hi = hi;
  return r;
}
__device__ inline sm::U128 sub(sm::U128 a, sm::U128 b) {  // a >= b
  sm::U128 r;
  r.lo = a.lo - b.lo;
  r.hi = a.hi - b.hi - (a.lo < b.lo ? 1u : 0u);
  return r;
}
__device__ inline sm::U128 min(sm::U128 a, sm::U128 b) {
  return a < b ? a : b;
}

}  // namespace detllm::kernels::cuda::sampling
