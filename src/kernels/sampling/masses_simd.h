// The sampler's masses q = mass(x, max, T) (sampler_math.h) four at a time with AVX2, bit for
// bit the scalar function: the same IEEE double operations in the same order per lane (the
// build has -ffp-contract=off, and intrinsics are never fused), the clamp and the exponent
// assembled on the same bit patterns, and the truncating double -> uint64 conversion (AVX2 has
// none) done on the bits: an integral-valued double in [0, 2^64) is its 53-bit significand
// shifted by its exponent, and the variable shifts give 0 for counts outside 0..63, which is
// the truncation of every value below 1. The scalar mass() stays the definition; the CPU
// sampler's full-vocabulary sums use this. Test: build/tests/test_kernels
// --gtest_filter='SamplerMassSimd*'.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/sampling/sampler_math.h"

namespace detllm::sampler_math {

// out[i] = mass(x[i], max, temperature) for i < n.
inline void masses_simd(const float* x, size_t n, float max, double temperature, uint64_t* out) {
  const __m256d vmax = _mm256_set1_pd(static_cast<double>(max));
  const __m256d vt = _mm256_set1_pd(temperature);
  const __m256i clamp = _mm256_set1_epi64x(static_cast<int64_t>(0xC087500000000000ULL));
  const __m256i sign = _mm256_set1_epi64x(static_cast<int64_t>(0x8000000000000000ULL));
  const __m256d inv_ln2 = _mm256_set1_pd(kInvLn2);
  const __m256d shifter = _mm256_set1_pd(0x1.8p52);
  const __m256d ln2_hi = _mm256_set1_pd(kLn2Hi), ln2_lo = _mm256_set1_pd(kLn2Lo);
  const __m256i exp_offset =
      _mm256_set1_epi64x(64 + 1023 - static_cast<int64_t>(bits_of(0x1.8p52)));
  const __m256d two_m64 = _mm256_set1_pd(0x1p-64), two_63 = _mm256_set1_pd(0x1p63);
  const __m256i mant_mask = _mm256_set1_epi64x((int64_t{1} << 52) - 1);
  const __m256i hidden = _mm256_set1_epi64x(int64_t{1} << 52);
  const __m256i c1075 = _mm256_set1_epi64x(1075), c1075n = _mm256_set1_epi64x(-1075);
  auto step = [](__m256d p, __m256d r, double c) {
    return _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(c));
  };
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    // e = exp_nonpositive((double(x) - double(max)) / T)
    const __m256d d = _mm256_div_pd(_mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), vmax), vt);
    // the clamp at -746 on the bit patterns, as unsigned 64-bit integers (x_bits > clamp)
    const __m256i xb = _mm256_castpd_si256(d);
    const __m256i above = _mm256_cmpgt_epi64(_mm256_xor_si256(xb, sign),
                                             _mm256_xor_si256(clamp, sign));
    const __m256d xc = _mm256_castsi256_pd(_mm256_blendv_epi8(xb, clamp, above));
    const __m256d shifted = _mm256_add_pd(_mm256_mul_pd(xc, inv_ln2), shifter);
    const __m256d k = _mm256_sub_pd(shifted, shifter);
    const __m256d r =
        _mm256_sub_pd(_mm256_sub_pd(xc, _mm256_mul_pd(k, ln2_hi)), _mm256_mul_pd(k, ln2_lo));
    __m256d p = _mm256_set1_pd(kInvFact13);
    p = step(p, r, kInvFact12);
    p = step(p, r, kInvFact11);
    p = step(p, r, kInvFact10);
    p = step(p, r, kInvFact9);
    p = step(p, r, kInvFact8);
    p = step(p, r, kInvFact7);
    p = step(p, r, kInvFact6);
    p = step(p, r, kInvFact5);
    p = step(p, r, kInvFact4);
    p = step(p, r, kInvFact3);
    p = step(p, r, 0.5);
    p = step(p, r, 1.0);
    p = step(p, r, 1.0);
    const __m256i biased = _mm256_add_epi64(_mm256_castpd_si256(shifted), exp_offset);
    const __m256d e = _mm256_mul_pd(
        _mm256_mul_pd(p, _mm256_castsi256_pd(_mm256_slli_epi64(biased, 52))), two_m64);
    // q = trunc(e * 2^63) for e in [0, 1]: significand >> (1075 - biased exponent), or << for
    // exponents past 52 (2^63 itself, at e = 1).
    const __m256i sb = _mm256_castpd_si256(_mm256_mul_pd(e, two_63));
    const __m256i be = _mm256_srli_epi64(sb, 52);  // sign is 0: e >= 0
    const __m256i sig = _mm256_or_si256(_mm256_and_si256(sb, mant_mask), hidden);
    const __m256i q = _mm256_or_si256(_mm256_srlv_epi64(sig, _mm256_sub_epi64(c1075, be)),
                                      _mm256_sllv_epi64(sig, _mm256_add_epi64(be, c1075n)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), q);
  }
  for (; i < n; ++i) out[i] = mass(x[i], max, temperature);
}

}  // namespace detllm::sampler_math
