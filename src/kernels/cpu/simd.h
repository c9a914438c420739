// AVX2/FMA building blocks shared by the CPU kernels, each with ONE fixed operation order:
// the horizontal-sum tree, tail loads (zero-padded), weight widening, and a polynomial exp.
// Every CPU kernel reduces through these, so their bits depend only on the build's SIMD width.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace detllm::kernels::cpu {

constexpr int kLanes = 8;  // fp32 lanes of a __m256: the build-time SIMD width (x86-64-v3)

// Lane mask selecting the first n (0..8) lanes.
inline __m256i lane_mask(int n) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), iota);
}

// The one horizontal-sum tree: ((v0+v1) + (v2+v3)) + ((v4+v5) + (v6+v7)).
inline float hsum8(__m256 v) {
  const __m256 h1 = _mm256_hadd_ps(v, v);    // v0+v1, v2+v3, ., . | v4+v5, v6+v7, ., .
  const __m256 h2 = _mm256_hadd_ps(h1, h1);  // (v0+v1)+(v2+v3), . | (v4+v5)+(v6+v7), .
  const __m128 lo = _mm256_castps256_ps128(h2);
  const __m128 hi = _mm256_extractf128_ps(h2, 1);
  return _mm_cvtss_f32(_mm_add_ss(lo, hi));
}

// Eight horizontal sums at once, lane i = hsum8(a[i]) with exactly hsum8's tree.
inline __m256 hsum8x8(const __m256 a[8]) {
  const __m256 ab = _mm256_hadd_ps(a[0], a[1]);  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(a[2], a[3]);
  const __m256 ef = _mm256_hadd_ps(a[4], a[5]);
  const __m256 gh = _mm256_hadd_ps(a[6], a[7]);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);                   // A03 B03 C03 D03 | A47 B47 C47 D47
  const __m256 efgh = _mm256_hadd_ps(ef, gh);                   // E03 F03 G03 H03 | E47 F47 G47 H47
  const __m256 low = _mm256_permute2f128_ps(abcd, efgh, 0x20);  // A03..D03 | E03..H03
  const __m256 high = _mm256_permute2f128_ps(abcd, efgh, 0x31);  // A47..D47 | E47..H47
  return _mm256_add_ps(low, high);
}

// Horizontal max (exact in any order).
inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Loads of 8 consecutive elements widened to fp32 (exact for every dtype).
inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
inline __m256 load8(const uint16_t* p, DType t) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (t == DType::kF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// The first n (< 8) elements, the other lanes 0.0f; never reads past p[n-1].
inline __m256 load_tail(const float* p, int n) {
  return _mm256_maskload_ps(p, lane_mask(n));
}
inline __m256 load_tail(const uint16_t* p, int n, DType t) {
  uint16_t buf[kLanes] = {};
  std::memcpy(buf, p, sizeof(uint16_t) * n);
  return load8(buf, t);
}

inline void store_tail(float* p, __m256 v, int n) {
  _mm256_maskstore_ps(p, lane_mask(n), v);
}

// exp(x) for 8 lanes: x = n·ln2 + r (Cody–Waite, |r| <= ln2/2), e^r by the degree-7 Taylor
// polynomial (truncation < 1e-8 relative), times 2^n. Within ~2 ulp of expf for
// x in [-87, 88]; x < -87 gives 0, x > 88 gives +inf, NaN stays NaN.
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 hi = _mm256_set1_ps(88.0f);
  // max/min return their second operand when either is NaN: NaN flows through to y.
  const __m256 xc = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);  // ln2 high part (exact)
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);       // ln2 - high part
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  return y;
}

// Scalar exp with exactly exp8's bits (lane 0 of exp8).
inline float exp1(float x) {
  return _mm256_cvtss_f32(exp8(_mm256_set1_ps(x)));
}

}  // namespace detllm::kernels::cpu
