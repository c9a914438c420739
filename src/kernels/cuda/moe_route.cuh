// One token's routing on one warp (moe.cu; the test build's negative control instantiates the
// other tie rule: tests/cuda/moe_negative_control.cu). See moe.cu for why the bits equal the
// host default's (kernels/moe.cpp).
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/sampling/sampler_math.h"

namespace detllm::kernels::cuda {

// Which of two equal router logits ranks first. kLowerIndex: the lower expert index, the rule
// of ops.h. kArrival exists only for the test build's negative control: the expert met first
// in a scan that starts at expert (token mod n_experts) — a tie rule by arrival order.
enum class MoeTieRule { kLowerIndex, kArrival };

namespace moe_detail {

namespace sm = ::detllm::sampler_math;

// The double an x86 host gets from a float (cvtss2sd): NaN keeps its sign and payload (quiet).
// The device's conversion may canonicalize a NaN, and the sign decides exp_nonpositive's clamp.
__device__ inline double host_double_of(float v) {
  const uint32_t b = __float_as_uint(v);
  if ((b & 0x7fffffffu) <= 0x7f800000u) return static_cast<double>(v);
  const uint64_t sign = static_cast<uint64_t>(b >> 31) << 63;
  const uint64_t payload = static_cast<uint64_t>(b & 0x003fffffu) << 29;
  return sm::double_of(sign | 0x7ff8000000000000ull | payload);
}

// a - b with an x86 host's NaN results (SSE subsd): a NaN operand comes back (the first one,
// quieted); inf - inf gives the default NaN, whose sign bit is set.
__device__ inline double host_dsub(double a, double b) {
  const uint64_t ab = sm::bits_of(a), bb = sm::bits_of(b);
  const uint64_t quiet = 0x0008000000000000ull;
  if ((ab & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) return sm::double_of(ab | quiet);
  if ((bb & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) return sm::double_of(bb | quiet);
  if (ab == bb && (ab & 0x7fffffffffffffffull) == 0x7ff0000000000000ull)
    return sm::double_of(0xfff8000000000000ull);
  return sm::dsub(a, b);
}

// -x by its sign bit (what the host's negation does, NaN included).
__device__ inline double host_neg(double x) {
  return sm::double_of(sm::bits_of(x) ^ 0x8000000000000000ull);
}

__device__ inline float rank_key(float v) { return isnan(v) ? -INFINITY : v; }

}  // namespace moe_detail

// Token t's routing on the calling warp (all 32 lanes): ids / w (k) of `logits` (n_experts)
// as Ops::moe_route; terms: n_experts doubles of shared memory for this warp.
template <MoeTieRule kRule>
__device__ inline void route_token(const float* logits, int32_t n_experts, int32_t k,
                                   bool renormalize, int32_t* ids, float* w, double* terms,
                                   int lane, int32_t t) {
  using namespace moe_detail;
  // Tie order of expert j: its index, or (test-only) its place in the token's rotated scan.
  const auto order = [&](int32_t j) {
    if constexpr (kRule == MoeTieRule::kLowerIndex) return j;
    else return (j - t % n_experts + n_experts) % n_experts;
  };
  uint32_t taken = 0;  // bit s: expert lane + 32 s already chosen
  float top_key = 0.0f;
  for (int32_t r = 0; r < k; ++r) {
    float best_key = -INFINITY;
    int32_t best_j = -1;
    for (int32_t s = 0, j = lane; j < n_experts; ++s, j += 32) {
      if (taken & (1u << s)) continue;
      const float key = rank_key(logits[j]);
      if (best_j < 0 || key > best_key || (key == best_key && order(j) < order(best_j))) {
        best_key = key;
        best_j = j;
      }
    }
    // A strict total order on (key, order): the butterfly leaves every lane the same winner.
    for (int off = 16; off > 0; off >>= 1) {
      const float ok = __shfl_xor_sync(0xffffffffu, best_key, off);
      const int32_t oj = __shfl_xor_sync(0xffffffffu, best_j, off);
      if (oj >= 0 && (best_j < 0 || ok > best_key || (ok == best_key && order(oj) < order(best_j)))) {
        best_key = ok;
        best_j = oj;
      }
    }
    if (best_j % 32 == lane) taken |= 1u << (best_j / 32);
    if (lane == 0) ids[r] = best_j;
    if (r == 0) top_key = best_key;
  }
  // Softmax terms exp(l - max) in double, then lane 0 sums in the host's order.
  const double max = static_cast<double>(top_key);  // a rank key: never NaN
  for (int32_t j = lane; j < n_experts; j += 32)
    terms[j] = sm::exp_nonpositive(host_dsub(host_double_of(logits[j]), max));
  __syncwarp();
  if (lane == 0) {
    double sum = 0;
    if (renormalize) {
      for (int32_t r = 0; r < k; ++r) sum = sm::dadd(sum, terms[ids[r]]);
    } else {
      for (int32_t j = 0; j < n_experts; ++j) sum = sm::dadd(sum, terms[j]);
    }
    for (int32_t r = 0; r < k; ++r) w[r] = sm::float_of(sm::ddiv(terms[ids[r]], sum));
  }
}

}  // namespace detllm::kernels::cuda
