// The sampler's per-element and scalar arithmetic, shared bit for bit by the CPU sampler
// (kernels/sampling/sampler.cpp) and the CUDA one (kernels/cuda/sampling.cu): exp and log of our own,
// logit gaps, weights and their exact fixed-point masses, 128-bit mass sums, the top-p threshold,
// the Philox draw and the rank key. Every function is DETLLM_HD (host and device); floating-point
// steps go through dadd/dsub/dmul/ddiv, which pin round-to-nearest on the device (no FMA
// contraction; the host build has -ffp-contract=off), so both sides perform the same IEEE
// operations. Tests: tests/kernels/sampler_math_test.cpp (CPU), tests/cuda/cuda_sampling_test.cpp.
//
// Why exact masses: every sum over the vocabulary (softmax normalizer, top-k mass, top-p
// cumulative mass, the kept mass, the inverse-CDF walk) adds masses q_i = floor(e_i * 2^63)
// as 128-bit integers. Integer addition is associative, so the ONE canonical result is
// independent of the order: a 256- or 1024-thread block, warp-aggregated shared-memory atomics,
// a radix select's bucket sums and the CPU's sequential loop all give the same bits.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "core/philox.h"

#if defined(__CUDACC__)
#define DETLLM_HD __host__ __device__
#else
#define DETLLM_HD
#endif

namespace detllm::sampler_math {

// ---- IEEE operations with pinned rounding --------------------------------------------------

// a + b, a - b, a * b, a / b in float or double, rounded to nearest even: on the device
// through the _rn intrinsics (never contracted into an FMA), on the host as the plain operator
// (the build has -ffp-contract=off). dadd... (double) and fadd... (float,
// kernels/sampling/logit_penalties.h) name them.
enum class PinnedOp : uint8_t { kAdd, kSub, kMul, kDiv };

template <PinnedOp kOp, typename T>
DETLLM_HD inline T pinned(T a, T b) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>) {
    if constexpr (kOp == PinnedOp::kAdd) return __fadd_rn(a, b);
    else if constexpr (kOp == PinnedOp::kSub) return __fsub_rn(a, b);
    else if constexpr (kOp == PinnedOp::kMul) return __fmul_rn(a, b);
    else return __fdiv_rn(a, b);
  } else {
    if constexpr (kOp == PinnedOp::kAdd) return __dadd_rn(a, b);
    else if constexpr (kOp == PinnedOp::kSub) return __dsub_rn(a, b);
    else if constexpr (kOp == PinnedOp::kMul) return __dmul_rn(a, b);
    else return __ddiv_rn(a, b);
  }
#else
  if constexpr (kOp == PinnedOp::kAdd) return a + b;
  else if constexpr (kOp == PinnedOp::kSub) return a - b;
  else if constexpr (kOp == PinnedOp::kMul) return a * b;
  else return a / b;
#endif
}
DETLLM_HD inline double dadd(double a, double b) { return pinned<PinnedOp::kAdd>(a, b); }
DETLLM_HD inline double dsub(double a, double b) { return pinned<PinnedOp::kSub>(a, b); }
DETLLM_HD inline double dmul(double a, double b) { return pinned<PinnedOp::kMul>(a, b); }
DETLLM_HD inline double ddiv(double a, double b) { return pinned<PinnedOp::kDiv>(a, b); }
DETLLM_HD inline uint64_t bits_of(double x) {
#ifdef __CUDA_ARCH__
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  return std::bit_cast<uint64_t>(x);
#endif
}
DETLLM_HD inline double double_of(uint64_t b) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(b));
#else
  return std::bit_cast<double>(b);
#endif
}
DETLLM_HD inline uint32_t bits_of(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}
// Round to nearest even (exact for |v| < 2^53).
DETLLM_HD inline double double_of_int(int64_t v) {
#ifdef __CUDA_ARCH__
  return __ll2double_rn(v);
#else
  return static_cast<double>(v);
#endif
}
DETLLM_HD inline float float_of(double x) {  // round to nearest even
#ifdef __CUDA_ARCH__
  return __double2float_rn(x);
#else
  return static_cast<float>(x);
#endif
}

// ---- exp and log of our own (no libm: the bits are a function of this code alone) ----------

inline constexpr double kLn2Hi = 0x1.62e42feep-1;        // ln 2 rounded to 32 bits: k * kLn2Hi
inline constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;  // is exact for |k| < 2^21; + kLn2Lo
inline constexpr double kInvLn2 = 0x1.71547652b82fep0;   // 1 / ln 2

constexpr double inv_factorial(int n) {
  double c = 1.0;
  for (int i = 2; i <= n; ++i) c /= i;
  return c;
}
// Evaluated at compile time (constexpr scalars are usable in device code; arrays are not).
inline constexpr double kInvFact3 = inv_factorial(3), kInvFact4 = inv_factorial(4),
                        kInvFact5 = inv_factorial(5), kInvFact6 = inv_factorial(6),
                        kInvFact7 = inv_factorial(7), kInvFact8 = inv_factorial(8),
                        kInvFact9 = inv_factorial(9), kInvFact10 = inv_factorial(10),
                        kInvFact11 = inv_factorial(11), kInvFact12 = inv_factorial(12),
                        kInvFact13 = inv_factorial(13);

// exp(x) for x <= 0 (valid up to x ~ 600). Branch-free.
DETLLM_HD inline double exp_nonpositive(double x) {
  // Clamp at -746 (exp rounds to 0 below it; -inf and NaN land there too), in the integer
  // domain: for negative doubles the bit pattern grows with the magnitude.
  constexpr uint64_t kClampBits = 0xC087500000000000ULL;  // -746.0
  const uint64_t x_bits = bits_of(x);
  const double xc = double_of(x_bits > kClampBits ? kClampBits : x_bits);
  // x = k ln2 + r, |r| <= ln2 / 2; adding the shifter rounds x / ln2 to an integer k.
  constexpr double kShifter = 0x1.8p52;
  const double shifted = dadd(dmul(xc, kInvLn2), kShifter);
  const double k = dsub(shifted, kShifter);
  const double r = dsub(dsub(xc, dmul(k, kLn2Hi)), dmul(k, kLn2Lo));
  // exp(r) by its Taylor series to degree 13 (truncation < 1e-17 relative), Horner's rule.
  double p = kInvFact13;
  p = dadd(dmul(p, r), kInvFact12);
  p = dadd(dmul(p, r), kInvFact11);
  p = dadd(dmul(p, r), kInvFact10);
  p = dadd(dmul(p, r), kInvFact9);
  p = dadd(dmul(p, r), kInvFact8);
  p = dadd(dmul(p, r), kInvFact7);
  p = dadd(dmul(p, r), kInvFact6);
  p = dadd(dmul(p, r), kInvFact5);
  p = dadd(dmul(p, r), kInvFact4);
  p = dadd(dmul(p, r), kInvFact3);
  p = dadd(dmul(p, r), 0.5);
  p = dadd(dmul(p, r), 1.0);
  p = dadd(dmul(p, r), 1.0);
  // p * 2^k as (p * 2^(k + 64)) * 2^-64: the first product is exact, the second rounds once
  // (also into the subnormal range). The low bits of `shifted` hold k in two's complement.
  const uint64_t biased_exponent = bits_of(shifted) - bits_of(kShifter) + 64 + 1023;
  return dmul(dmul(p, double_of(biased_exponent << 52)), 0x1p-64);
}

// log(x) for finite x > 0: x = m 2^e with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact),
// s = f / (2 + f), log(1 + f) = 2 atanh(s) = f - (f^2/2 - s (f^2/2 + R)),
// R = sum_{n=1..11} 2 s^(2n) / (2n + 1).
DETLLM_HD inline double log_positive(double x) {
  int64_t e = 0;
  if (x < 0x1p-1022) {  // subnormal: normalize first
    x = dmul(x, 0x1p54);
    e = -54;
  }
  const uint64_t bits = bits_of(x);
  e += static_cast<int64_t>(bits >> 52) - 1022;  // x = m 2^e, m in [0.5, 1)
  double m = double_of((bits & 0x000fffffffffffffULL) | 0x3fe0000000000000ULL);
  if (m < 0x1.6a09e667f3bcdp-1) {  // sqrt(1/2)
    m = dmul(m, 2.0);
    e -= 1;
  }
  const double f = dsub(m, 1.0);
  const double s = ddiv(f, dadd(2.0, f));
  const double z = dmul(s, s);
  double r = ddiv(2.0, 23.0);
  for (int n = 10; n >= 1; --n) r = dadd(dmul(r, z), ddiv(2.0, double_of_int(2 * n + 1)));
  r = dmul(r, z);
  const double half_f2 = dmul(dmul(0.5, f), f);
  const double de = double_of_int(e);
  return dadd(dmul(de, kLn2Hi),
              dsub(f, dsub(half_f2, dadd(dmul(s, dadd(half_f2, r)), dmul(de, kLn2Lo)))));
}

// ---- 128-bit unsigned integers (exact mass sums) --------------------------------------------

struct U128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
};

DETLLM_HD inline U128 u128(uint64_t lo) {
  U128 r;
  r.lo = lo;
  return r;
}
DETLLM_HD inline U128 add(U128 a, U128 b) {
  U128 r;
  r.lo = a.lo + b.lo;
  r.hi = a.hi + b.hi + (r.lo < a.lo ? 1u : 0u);
  return r;
}
DETLLM_HD inline U128 add(U128 a, uint64_t b) {
  U128 r;
  r.lo = a.lo + b;
  r.hi = a.hi + (r.lo < b ? 1u : 0u);
  return r;
}
DETLLM_HD inline bool operator==(U128 a, U128 b) {
  return a.lo == b.lo && a.hi == b.hi;
}
DETLLM_HD inline bool operator<(U128 a, U128 b) {
  return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo);
}
DETLLM_HD inline bool operator>=(U128 a, U128 b) {
  return !(a < b);
}
DETLLM_HD inline bool operator>(U128 a, U128 b) {
  return b < a;
}

// a * b, exact (32-bit halves: the same integer result on every machine).
DETLLM_HD inline U128 mul_wide(uint64_t a, uint64_t b) {
  constexpr uint64_t kMask = 0xffffffffULL;
  const uint64_t a0 = a & kMask, a1 = a >> 32, b0 = b & kMask, b1 = b >> 32;
  const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  const uint64_t mid = (p00 >> 32) + (p01 & kMask) + (p10 & kMask);
  U128 r;
  r.lo = (p00 & kMask) | (mid << 32);
  r.hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
  return r;
}

// Number of significant bits (0 for 0).
DETLLM_HD inline int bit_length(uint64_t v) {
#ifdef __CUDA_ARCH__
  return 64 - __clzll(static_cast<long long>(v));
#else
  return 64 - std::countl_zero(v);
#endif
}

// v rounded to the nearest double (ties to even): the top 63 bits with a sticky bit for the
// rest, converted once (an integer conversion rounds to nearest even on both sides), then
// scaled by an exact power of two.
DETLLM_HD inline double to_double(U128 v) {
  const int n = v.hi != 0 ? 64 + bit_length(v.hi) : bit_length(v.lo);
  if (n <= 63) return double_of_int(static_cast<int64_t>(v.lo));
  const int shift = n - 63;  // 1 .. 65
  uint64_t w = 0;
  bool sticky = false;
  if (shift < 64) {
    w = (v.lo >> shift) | (v.hi << (64 - shift));
    sticky = (v.lo << (64 - shift)) != 0;
  } else {
    w = v.hi >> (shift - 64);
    sticky = v.lo != 0 || (shift > 64 && (v.hi << (128 - shift)) != 0);
  }
  w |= sticky ? 1u : 0u;
  return dmul(double_of_int(static_cast<int64_t>(w)),
              double_of(static_cast<uint64_t>(1023 + shift) << 52));
}

// ---- The sampler's quantities (spec in kernels/sampling/sampler.h) ------------------------------------

// Masses are weights in fixed point with 63 fractional bits: weight 1 (the maximum) is 2^63.
inline constexpr int kMassBits = 63;

// d = double(x) - double(max)
DETLLM_HD inline double logit_gap(float x, float max) {
  return dsub(static_cast<double>(x), static_cast<double>(max));
}
// e = exp(d / T), in [0, 1]. For T == 1, d / 1.0 == d: the weights of Z1.
DETLLM_HD inline double weight(float x, float max, double temperature) {
  return exp_nonpositive(ddiv(logit_gap(x, max), temperature));
}
// q = floor(e * 2^63), exact (a power-of-two scaling, then truncation) and <= 2^63.
DETLLM_HD inline uint64_t mass_of_weight(double e) {
  const double scaled = dmul(e, 0x1p63);
#ifdef __CUDA_ARCH__
  return __double2ull_rz(scaled);
#else
  return static_cast<uint64_t>(scaled);
#endif
}
DETLLM_HD inline uint64_t mass(float x, float max, double temperature) {
  return mass_of_weight(weight(x, max, temperature));
}
// log(Z1) with Z1 = sum of the T = 1 masses (>= 2^63): log(double(Z1) * 2^-63).
DETLLM_HD inline double log_normalizer(U128 z1_mass) {
  return log_positive(dmul(to_double(z1_mass), 0x1p-63));
}
// logprob = float(d - log Z1)
DETLLM_HD inline float logprob_from_gap(float x, float max, double log_z1) {
  return float_of(dsub(logit_gap(x, max), log_z1));
}
// min-p in the log domain: d / T >= log(min_p), a prefix of the rank order.
DETLLM_HD inline bool passes_min_p(float x, float max, double temperature, double log_min_p) {
  return ddiv(logit_gap(x, max), temperature) >= log_min_p;
}

// ceil(top_p * z) exactly, top_p in (0, 1) a float, z < 2^100.
DETLLM_HD inline U128 top_p_threshold(U128 z, float top_p) {
  const uint32_t b = bits_of(top_p);
  const uint32_t exponent = (b >> 23) & 0xffu;
  const uint64_t m = exponent == 0 ? (b & 0x7fffffu) : ((b & 0x7fffffu) | 0x800000u);
  const int shift = exponent == 0 ? 149 : 150 - static_cast<int>(exponent);  // p = m 2^-shift
  U128 prod = mul_wide(z.lo, m);
  prod.hi += z.hi * m;  // z.hi < 2^36, m < 2^24: no overflow
  if (shift >= 128) return u128(prod.lo != 0 || prod.hi != 0 ? 1u : 0u);
  U128 q;
  bool rest = false;
  if (shift == 0) {
    q = prod;
  } else if (shift < 64) {
    q.lo = (prod.lo >> shift) | (prod.hi << (64 - shift));
    q.hi = prod.hi >> shift;
    rest = (prod.lo << (64 - shift)) != 0;
  } else {
    q.lo = prod.hi >> (shift - 64);
    rest = prod.lo != 0 || (shift > 64 && (prod.hi << (128 - shift)) != 0);
  }
  return rest ? add(q, uint64_t{1}) : q;
}

// The draw's 53 random bits: Philox4x32-10 keyed by the seed, counter
// [position, sample_index, 0, RandomDomain::kSampleToken] (core/philox.h, same words), the top
// 53 bits of words 0 and 1. uniform53_from_bits(b0, b1) == u53 * 2^-53.
DETLLM_HD inline uint64_t draw_bits53(uint64_t seed, uint32_t position, uint32_t sample_index) {
  uint32_t c0 = position, c1 = sample_index, c2 = 0;
  uint32_t c3 = static_cast<uint32_t>(RandomDomain::kSampleToken);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const uint64_t prod0 = static_cast<uint64_t>(kPhiloxM0) * c0;
    const uint64_t prod1 = static_cast<uint64_t>(kPhiloxM1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(prod1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(prod1);
    const uint32_t n2 = static_cast<uint32_t>(prod0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(prod0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
  }
  return ((static_cast<uint64_t>(c0) << 32) | c1) >> 11;
}

// t = floor(u53 * s / 2^53) for s < 2^100: the draw's target in mass units (< s).
DETLLM_HD inline U128 draw_target(U128 s, uint64_t u53) {
  const U128 a = mul_wide(s.lo, u53);
  const U128 b = mul_wide(s.hi, u53);
  const uint64_t l0 = a.lo;
  const uint64_t l1 = a.hi + b.lo;
  const uint64_t l2 = b.hi + (l1 < a.hi ? 1u : 0u);
  U128 t;
  t.lo = (l0 >> 53) | (l1 << 11);
  t.hi = (l1 >> 53) | (l2 << 11);
  return t;
}

// ---- The rank order (logit desc, token id asc) as an integer key ---------------------------

// Smaller key = earlier in the rank order. -0.0 and +0.0 compare equal as floats, so they get
// one key (ties between them fall to the token id, as in the float comparison).
DETLLM_HD inline uint32_t rank_value_key(float x) {
  uint32_t b = bits_of(x);
  if ((b << 1) == 0) b = 0;
  const uint32_t ascending = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ~ascending;
}
// Key of (x, id) in the rank order; unique per token. id_bits >= bit_length(vocab - 1).
DETLLM_HD inline uint64_t rank_key(float x, uint32_t id, int id_bits) {
  return (static_cast<uint64_t>(rank_value_key(x)) << id_bits) | id;
}
// The key of -inf (masked tokens, weight 0) in rank_value_key's order.
DETLLM_HD inline uint32_t rank_value_key_neg_inf() {
  return 0xff800000u;
}

}  // namespace detllm::sampler_math
