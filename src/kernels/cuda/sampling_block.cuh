// Block-wide exact integer reductions and scans of the device sampler (sampling.cu,
// sampling_finish.cu): 128-bit masses and counts over a 512-thread block. Integer sums, so the
// grouping (shuffles, warps, blocks) changes no bit.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/sampling_layout.cuh"

namespace detllm::kernels::cuda::sampling {

constexpr unsigned kFull = 0xffffffffu;

struct Reduce {  // shared memory of the reductions below
  unsigned long long a[kWarps];
  unsigned long long b[kWarps];
  unsigned int c[kWarps];
  unsigned long long bcast_a, bcast_b;
  unsigned int bcast_c;
};

__device__ inline sm::U128 shfl_down_u128(sm::U128 v, int offset) {
  sm::U128 r;
  r.lo = __shfl_down_sync(kFull, v.lo, offset);
  r.hi = __shfl_down_sync(kFull, v.hi, offset);
  return r;
}
__device__ inline sm::U128 shfl_up_u128(sm::U128 v, int offset) {
  sm::U128 r;
  r.lo = __shfl_up_sync(kFull, v.lo, offset);
  r.hi = __shfl_up_sync(kFull, v.hi, offset);
  return r;
}
__device__ inline sm::U128 shfl_xor_u128(sm::U128 v, int offset) {
  sm::U128 r;
  r.lo = __shfl_xor_sync(kFull, v.lo, offset);
  r.hi = __shfl_xor_sync(kFull, v.hi, offset);
  return r;
}

// An exact mass sum in shared memory as three 32-bit words, w0 + w1 2^32 + w2 2^64 (< 2^96),
// added to by native 32-bit atomics that carry into the next word (sm_90's 64-bit shared
// atomicAdd compiles to a compare-and-swap loop, ATOMS.CAST.SPIN.64; the 32-bit one is one
// ATOMS.ADD). Every add that wraps a word carries one into the next, so the words hold the
// exact sum in any order.
__device__ inline void atomic_add_mass96(unsigned int* w0, unsigned int* w1, unsigned int* w2,
                                         sm::U128 v) {
  const unsigned int a0 = static_cast<unsigned int>(v.lo);
  unsigned long long a1 = v.lo >> 32;  // < 2^32, + 1 carry at most
  unsigned long long a2 = v.hi;
  if (a0 != 0) {
    const unsigned int old = atomicAdd(w0, a0);
    if (old + a0 < old) a1 += 1;
  }
  if ((a1 >> 32) != 0) {  // a1 == 2^32
    a1 = 0;
    a2 += 1;
  }
  if (a1 != 0) {
    const unsigned int add = static_cast<unsigned int>(a1);
    const unsigned int old = atomicAdd(w1, add);
    if (old + add < old) a2 += 1;
  }
  if (a2 != 0) atomicAdd(w2, static_cast<unsigned int>(a2));
}
__device__ inline sm::U128 mass96(unsigned int w0, unsigned int w1, unsigned int w2) {
  return u128_of(static_cast<unsigned long long>(w0) | (static_cast<unsigned long long>(w1) << 32),
                 w2);
}

// Exact sum over the block (every thread gets it). Every thread of the block calls it.
__device__ inline sm::U128 block_sum(sm::U128 v, Reduce& s) {
  for (int offset = 16; offset > 0; offset >>= 1) v = sm::add(v, shfl_down_u128(v, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    s.a[warp] = v.lo;
    s.b[warp] = v.hi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sm::U128 total;
    for (int w = 0; w < kWarps; ++w) total = sm::add(total, u128_of(s.a[w], s.b[w]));
    s.bcast_a = total.lo;
    s.bcast_b = total.hi;
  }
  __syncthreads();
  const sm::U128 total = u128_of(s.bcast_a, s.bcast_b);
  __syncthreads();  // the next reduction may overwrite the arrays
  return total;
}

__device__ inline unsigned int block_count(unsigned int v, Reduce& s) {
  return static_cast<unsigned int>(block_sum(sm::u128(v), s).lo);
}

__device__ inline unsigned long long block_min(unsigned long long v, Reduce& s) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const unsigned long long o = __shfl_down_sync(kFull, v, offset);
    v = o < v ? o : v;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) s.a[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long m = s.a[0];
    for (int w = 1; w < kWarps; ++w) m = s.a[w] < m ? s.a[w] : m;
    s.bcast_a = m;
  }
  __syncthreads();
  const unsigned long long m = s.bcast_a;
  __syncthreads();
  return m;
}

struct CountMass {
  unsigned int count;
  sm::U128 mass;
};
// The warp's inclusive and exclusive prefix sums of v in lane order (exact integers).
struct WarpScan {
  CountMass incl, excl;
};
__device__ inline WarpScan warp_scan(CountMass v) {
  const int lane = threadIdx.x % 32;
  CountMass incl = v;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const unsigned int c = __shfl_up_sync(kFull, incl.count, offset);
    const sm::U128 m = shfl_up_u128(incl.mass, offset);
    if (lane >= offset) {
      incl.count += c;
      incl.mass = sm::add(incl.mass, m);
    }
  }
  CountMass excl;
  excl.count = __shfl_up_sync(kFull, incl.count, 1);
  excl.mass = shfl_up_u128(incl.mass, 1);
  if (lane == 0) excl = CountMass{0, sm::U128{}};
  return {incl, excl};
}
// Exclusive prefix sum over the block in thread order of (count, mass): thread t gets the sum
// over threads < t. Every thread of the block calls it.
__device__ inline CountMass block_exclusive_scan(CountMass v, Reduce& s) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const WarpScan ws = warp_scan(v);
  const CountMass incl = ws.incl;
  CountMass excl = ws.excl;
  if (lane == 31) {
    s.c[warp] = incl.count;
    s.a[warp] = incl.mass.lo;
    s.b[warp] = incl.mass.hi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // warp totals -> exclusive warp offsets, in place
    CountMass run{0, sm::U128{}};
    for (int w = 0; w < kWarps; ++w) {
      const CountMass t{s.c[w], u128_of(s.a[w], s.b[w])};
      s.c[w] = run.count;
      s.a[w] = run.mass.lo;
      s.b[w] = run.mass.hi;
      run.count += t.count;
      run.mass = sm::add(run.mass, t.mass);
    }
  }
  __syncthreads();
  excl.count += s.c[warp];
  excl.mass = sm::add(excl.mass, u128_of(s.a[warp], s.b[warp]));
  __syncthreads();
  return excl;
}

// The first bucket whose inclusive (count or mass) reaches the target (-1: none): the bucket
// holding the end of the smallest rank prefix that reaches it. Every thread of the block calls
// it; `found` is shared memory.
__device__ inline int find_bucket(const RowHist& h, bool by_mass, unsigned int target_count,
                                  sm::U128 target_mass, int& found) {
  if (threadIdx.x == 0) found = -1;
  __syncthreads();
  for (int b = threadIdx.x; b < kBuckets; b += kThreads) {
    const bool reaches = by_mass ? h.mass_through(b) >= target_mass
                                 : h.count_through(b) >= target_count;
    const bool before = b > 0 && (by_mass ? h.mass_through(b - 1) >= target_mass
                                          : h.count_through(b - 1) >= target_count);
    if (reaches && !before) found = b;  // one bucket at most: the sums never decrease
  }
  __syncthreads();
  const int b = found;
  __syncthreads();
  return b;
}

}  // namespace detllm::kernels::cuda::sampling
