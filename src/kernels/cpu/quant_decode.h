// AVX2 decoding of GGUF block rows to fp32 with exactly the bits of core/quant.h's scalar
// decoders: the same integer extraction, then the same fp32 values per element. Where the
// scalar decoder multiplies then adds (Q4_1: q * d + m; Q4_K: (d * scale) * q - dmin * min),
// the product is EXACT in fp32 — q has 4 bits and d (an f16) 11 significant bits, d * scale
// (6 bits) 17, so q * d has at most 21 of fp32's 24 and is never subnormal — so the one
// rounding of an FMA equals the scalar's round(round(q * d) + m) bit for bit, in one
// instruction instead of two. The same holds for Q5_1 (5 + 11 bits), Q2_K (2 + 4 + 11) and
// Q5_K (5 + 6 + 11). (Q6_K's (d * scale) * q can need 25 bits: it keeps the plain multiply;
// Q5_0, Q3_K, IQ4_NL and IQ4_XS only multiply.) matmul.cpp decodes weight rows with these in registers / L1 and then runs its
// fp32 micro-kernels, so a quantized matmul has the bits of the fp32 matmul on the
// dequantized weights.
// Test: build/tests/test_kernels --gtest_filter='*Quant*'.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/quant.h"

namespace detllm::kernels::cpu {

inline float load_f16_scalar(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);  // F16C: exact, like f16_to_f32
}

// 16 bytes of nibbles -> the block's 32 quant values as 4 × 8 int32: out[g] holds elements
// 8g..8g+7, i.e. out[0], out[1] the low nibbles of bytes 0-7, 8-15 and out[2], out[3] their
// high nibbles. Two zero-extending loads of 8 bytes, then a mask or a shift per register (the
// bytes are zero-extended, so >> 4 needs no mask): 6 instructions for 32 values.
inline void nibbles_to_i32(const uint8_t* qs, __m256i out[4]) {
  const __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs)));
  const __m256i b1 =
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8)));
  const __m256i mask = _mm256_set1_epi32(0x0F);
  out[0] = _mm256_and_si256(b0, mask);
  out[1] = _mm256_and_si256(b1, mask);
  out[2] = _mm256_srli_epi32(b0, 4);
  out[3] = _mm256_srli_epi32(b1, 4);
}

// Q4_0 block (18 B) -> y[0..32): (q - 8) * d.
inline void decode_block_q4_0(const uint8_t* b, float* y) {
  const __m256 d = _mm256_set1_ps(load_f16_scalar(b));
  __m256i q[4];
  nibbles_to_i32(b + 2, q);
  const __m256i eight = _mm256_set1_epi32(8);
  for (int g = 0; g < 4; ++g)
    _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q[g], eight)), d));
}

// Q4_1 block (20 B) -> y[0..32): q * d + m (q * d exact: one FMA rounds as the scalar's add).
inline void decode_block_q4_1(const uint8_t* b, float* y) {
  const __m256 d = _mm256_set1_ps(load_f16_scalar(b));
  const __m256 m = _mm256_set1_ps(load_f16_scalar(b + 2));
  __m256i q[4];
  nibbles_to_i32(b + 4, q);
  for (int g = 0; g < 4; ++g)
    _mm256_storeu_ps(y + 8 * g, _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[g]), d, m));
}

// Q8_0 block (34 B) -> y[0..32): q * d.
inline void decode_block_q8_0(const uint8_t* b, float* y) {
  const __m256 d = _mm256_set1_ps(load_f16_scalar(b));
  for (int g = 0; g < 4; ++g) {
    const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * g));
    _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), d));
  }
}

// Q6_K super-block (210 B) -> y[0..256): (d * scale) * (q - 32).
inline void decode_block_q6_k(const uint8_t* b, float* y) {
  const float d = load_f16_scalar(b + 208);
  const __m256i m4 = _mm256_set1_epi32(0x0F);
  const __m256i m2 = _mm256_set1_epi32(3);
  const __m256i k32 = _mm256_set1_epi32(32);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
    float* out = y + 128 * h;
    for (int g = 0; g < 4; ++g) {  // l in [8g, 8g + 8)
      const int l = 8 * g;
      const int is = l / 16;
      auto ld = [](const uint8_t* p) {
        return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      };
      const __m256i a = ld(ql + l), c = ld(ql + l + 32), hb = ld(qh + l);
      const __m256i q1 = _mm256_sub_epi32(
          _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi32(_mm256_and_si256(hb, m2), 4)),
          k32);
      const __m256i q2 = _mm256_sub_epi32(
          _mm256_or_si256(_mm256_and_si256(c, m4),
                          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 2), m2), 4)),
          k32);
      const __m256i q3 = _mm256_sub_epi32(
          _mm256_or_si256(_mm256_srli_epi32(a, 4),
                          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 4), m2), 4)),
          k32);
      const __m256i q4 = _mm256_sub_epi32(
          _mm256_or_si256(_mm256_srli_epi32(c, 4),
                          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 6), m2), 4)),
          k32);
      const __m256 s1 = _mm256_set1_ps(d * static_cast<float>(scales[is + 0]));
      const __m256 s2 = _mm256_set1_ps(d * static_cast<float>(scales[is + 2]));
      const __m256 s3 = _mm256_set1_ps(d * static_cast<float>(scales[is + 4]));
      const __m256 s4 = _mm256_set1_ps(d * static_cast<float>(scales[is + 6]));
      _mm256_storeu_ps(out + l, _mm256_mul_ps(s1, _mm256_cvtepi32_ps(q1)));
      _mm256_storeu_ps(out + l + 32, _mm256_mul_ps(s2, _mm256_cvtepi32_ps(q2)));
      _mm256_storeu_ps(out + l + 64, _mm256_mul_ps(s3, _mm256_cvtepi32_ps(q3)));
      _mm256_storeu_ps(out + l + 96, _mm256_mul_ps(s4, _mm256_cvtepi32_ps(q4)));
    }
  }
}

// The fifth bits of a Q5_0 / Q5_1 block's elements 8g..8g+7 (bit e of qh), at bit 4.
inline __m256i q5_high_bits(uint32_t qh, int g) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i shift = _mm256_add_epi32(lanes, _mm256_set1_epi32(8 * g));
  const __m256i bit = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(qh)), shift),
                                       _mm256_set1_epi32(1));
  return _mm256_slli_epi32(bit, 4);
}

// Q5_0 block (22 B) -> y[0..32): (q - 16) * d, q = nibble | fifth bit << 4.
inline void decode_block_q5_0(const uint8_t* b, float* y) {
  const __m256 d = _mm256_set1_ps(load_f16_scalar(b));
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  __m256i q[4];
  nibbles_to_i32(b + 6, q);
  const __m256i sixteen = _mm256_set1_epi32(16);
  for (int g = 0; g < 4; ++g) {
    const __m256i v = _mm256_sub_epi32(_mm256_or_si256(q[g], q5_high_bits(qh, g)), sixteen);
    _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(d, _mm256_cvtepi32_ps(v)));
  }
}

// Q5_1 block (24 B) -> y[0..32): d * q + m (d * q exact: one FMA rounds as the scalar's add).
inline void decode_block_q5_1(const uint8_t* b, float* y) {
  const __m256 d = _mm256_set1_ps(load_f16_scalar(b));
  const __m256 m = _mm256_set1_ps(load_f16_scalar(b + 2));
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  __m256i q[4];
  nibbles_to_i32(b + 8, q);
  for (int g = 0; g < 4; ++g) {
    const __m256i v = _mm256_or_si256(q[g], q5_high_bits(qh, g));
    _mm256_storeu_ps(y + 8 * g, _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(v), m));
  }
}

// 16 bytes of IQ4 nibbles -> their 32 code-book values (kIq4nlValues) as fp32 times dl, into
// y[0..32): low nibbles are elements 0..15, high nibbles 16..31 (one byte shuffle a half).
inline void iq4_nibbles_scaled(const uint8_t* qs, __m256 dl, float* y) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(bytes, mask));
  const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
  const __m128i v[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int g = 0; g < 4; ++g)
    _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(dl, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v[g]))));
}

// IQ4_NL block (18 B) -> y[0..32): d * value.
inline void decode_block_iq4_nl(const uint8_t* b, float* y) {
  iq4_nibbles_scaled(b + 2, _mm256_set1_ps(load_f16_scalar(b)), y);
}

// IQ4_XS super-block (136 B) -> y[0..256): (d * (scale - 32)) * value, per sub-block of 32.
inline void decode_block_iq4_xs(const uint8_t* b, float* y) {
  const float d = load_f16_scalar(b);
  uint16_t sh;
  std::memcpy(&sh, b + 2, 2);
  const uint8_t* sl = b + 4;
  for (int s = 0; s < 8; ++s) {
    const int ls = ((sl[s / 2] >> (4 * (s % 2))) & 0x0F) | (((sh >> (2 * s)) & 3) << 4);
    iq4_nibbles_scaled(b + 8 + 16 * s, _mm256_set1_ps(d * static_cast<float>(ls - 32)),
                       y + 32 * s);
  }
}

// Eight bytes zero-extended to int32 lanes.
inline __m256i load8_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Q2_K super-block (84 B) -> y[0..256): (d * scale) * q - (dmin * min), per sub-block of 16
// (d * scale * q exact: one FMA rounds as the scalar's sub). Elements 128h + 32j + l take
// bits 2j of qs[32h + l].
inline void decode_block_q2_k(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const uint8_t* qs = b + 16;
  const float d = load_f16_scalar(b + 80);
  const float dmin = load_f16_scalar(b + 82);
  const __m256i three = _mm256_set1_epi32(3);
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int g = 0; g < 4; ++g) {  // l in [8g, 8g + 8), sub-block 8h + 2j + g / 2
        const int s = 8 * h + 2 * j + g / 2;
        const __m256 dl = _mm256_set1_ps(d * static_cast<float>(sc[s] & 0x0F));
        const __m256 ml = _mm256_set1_ps(dmin * static_cast<float>(sc[s] >> 4));
        const __m256i q =
            _mm256_and_si256(_mm256_srli_epi32(load8_u8(qs + 32 * h + 8 * g), 2 * j), three);
        _mm256_storeu_ps(y + 128 * h + 32 * j + 8 * g,
                         _mm256_fmsub_ps(dl, _mm256_cvtepi32_ps(q), ml));
      }
}

// Q3_K super-block (110 B) -> y[0..256): (d * scale) * q, q = low two bits (as Q2_K) minus 4
// where bit 4h + j of hmask[l] is clear.
inline void decode_block_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = load_f16_scalar(b + 108);
  const __m256i three = _mm256_set1_epi32(3);
  const __m256i one = _mm256_set1_epi32(1);
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int g = 0; g < 4; ++g) {
        const int s = 8 * h + 2 * j + g / 2;
        const __m256 dl = _mm256_set1_ps(d * static_cast<float>(q3_k_scale(sc, s)));
        const __m256i lo =
            _mm256_and_si256(_mm256_srli_epi32(load8_u8(qs + 32 * h + 8 * g), 2 * j), three);
        const __m256i hbit = _mm256_and_si256(_mm256_srli_epi32(load8_u8(hm + 8 * g), 4 * h + j), one);
        // (1 - hbit) * 4 subtracted: 0 where the mask bit is set, 4 where it is clear.
        const __m256i q = _mm256_sub_epi32(lo, _mm256_slli_epi32(_mm256_xor_si256(hbit, one), 2));
        _mm256_storeu_ps(y + 128 * h + 32 * j + 8 * g, _mm256_mul_ps(dl, _mm256_cvtepi32_ps(q)));
      }
}

// Q4_K (144 B) and Q5_K (176 B) super-blocks -> y[0..256): (d * scale) * q - (dmin * min), per
// sub-block of 32 (k_scale_min), q = the nibble of qs (Q5_K: | bit s of qh[l] << 4). d * scale
// * q is exact: one FMA rounds as the scalar's sub.
template <bool kFifthBit>
inline void decode_block_q45_k(const uint8_t* b, float* y) {
  const float d = load_f16_scalar(b);
  const float dmin = load_f16_scalar(b + 2);
  const uint8_t* sc = b + 4;
  const uint8_t* qh = b + 16;                     // Q5_K only
  const uint8_t* qs = b + (kFifthBit ? 48 : 16);
  const __m256i mask = _mm256_set1_epi32(0x0F);
  const __m256i one = _mm256_set1_epi32(1);
  for (int s = 0; s < 8; ++s) {
    int scale, min;
    k_scale_min(sc, s, &scale, &min);
    const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(scale));
    const __m256 m1 = _mm256_set1_ps(dmin * static_cast<float>(min));
    const uint8_t* q = qs + 32 * (s / 2);
    const int shift = (s % 2) * 4;
    for (int g = 0; g < 4; ++g) {
      __m256i v = _mm256_and_si256(_mm256_srli_epi32(load8_u8(q + 8 * g), shift), mask);
      if constexpr (kFifthBit) {
        v = _mm256_or_si256(v, _mm256_slli_epi32(
                                   _mm256_and_si256(_mm256_srli_epi32(load8_u8(qh + 8 * g), s), one),
                                   4));
      }
      _mm256_storeu_ps(y + 32 * s + 8 * g, _mm256_fmsub_ps(d1, _mm256_cvtepi32_ps(v), m1));
    }
  }
}

// One 32-element block of Q4_0 / Q4_1 / Q8_0 decoded into four registers (elements 8g..8g+7
// in w[g]) with exactly the bits of the decode_block_* stores above.
template <DType T>
inline void decode_block32_regs(const uint8_t* b, __m256 w[4]) {
  static_assert(T == DType::kQ4_0 || T == DType::kQ4_1 || T == DType::kQ8_0);
  if constexpr (T == DType::kQ8_0) {
    const __m256 d = _mm256_set1_ps(load_f16_scalar(b));
    for (int g = 0; g < 4; ++g) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * g));
      w[g] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), d);
    }
  } else if constexpr (T == DType::kQ4_1) {
    const __m256 d = _mm256_set1_ps(load_f16_scalar(b));
    const __m256 m = _mm256_set1_ps(load_f16_scalar(b + 2));
    __m256i q[4];
    nibbles_to_i32(b + 4, q);
    for (int g = 0; g < 4; ++g) w[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[g]), d, m);
  } else {
    const __m256 d = _mm256_set1_ps(load_f16_scalar(b));
    __m256i q[4];
    nibbles_to_i32(b + 2, q);
    const __m256i eight = _mm256_set1_epi32(8);
    for (int g = 0; g < 4; ++g)
      w[g] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q[g], eight)), d);
  }
}

// y[0..n) = the first n elements of a row of block type t (n a multiple of the block size).
inline void decode_row(DType t, const uint8_t* src, float* y, int64_t n) {
  const int64_t be = dtype_block_elems(t);
  const int64_t bb = dtype_block_bytes(t);
  const int64_t n_blocks = n / be;
  switch (t) {
    case DType::kQ4_0:
      for (int64_t i = 0; i < n_blocks; ++i) decode_block_q4_0(src + i * bb, y + i * be);
      return;
    case DType::kQ4_1:
      for (int64_t i = 0; i < n_blocks; ++i) decode_block_q4_1(src + i * bb, y + i * be);
      return;
    case DType::kQ8_0:
      for (int64_t i = 0; i < n_blocks; ++i) decode_block_q8_0(src + i * bb, y + i * be);
      return;
    case DType::kQ4_K:
      for (int64_t i = 0; i < n_blocks; ++i) decode_block_q45_k<false>(src + i * bb, y + i * be);
      return;
    case DType::kQ6_K:
      for (int64_t i = 0; i < n_blocks; ++i) decode_block_q6_k(src + i * bb, y + i * be);
      return;
    case DType::kQ5_0:
      for (int64_t i = 0; i < n_blocks; ++i) decode_block_q5_0(src + i * bb, y + i * be);
      return;
    case DType::kQ5_1:
      for (int64_t i = 0; i < n_blocks; ++i) decode_block_q5_1(src + i * bb, y + i * be);
      return;
    case DType::kIQ4_NL:
      for (int64_t i = 0; i < n_blocks; ++i) decode_block_iq4_nl(src + i * bb, y + i * be);
      return;
    case DType::kQ2_K:
      for (int64_t i = 0; i < n_blocks; ++i) decode_block_q2_k(src + i * bb, y + i * be);
      return;
    case DType::kQ3_K:
      for (int64_t i = 0; i < n_blocks; ++i) decode_block_q3_k(src + i * bb, y + i * be);
      return;
    case DType::kQ5_K:
      for (int64_t i = 0; i < n_blocks; ++i) decode_block_q45_k<true>(src + i * bb, y + i * be);
      return;
    case DType::kIQ4_XS:
      for (int64_t i = 0; i < n_blocks; ++i) decode_block_iq4_xs(src + i * bb, y + i * be);
      return;
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kF8E4M3B128:
    case DType::kF8E4M3G128:
      break;
  }
  dequantize_row(t, src, y, n);  // element types: the scalar widening
}

}  // namespace detllm::kernels::cpu
