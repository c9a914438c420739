// Block layouts and their scalar dequantization (see quant.h). Each block is read with memcpy
// (blocks are packed, so nothing is aligned).
#include "core/quant.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp8.h"

namespace detllm {

static_assert(std::endian::native == std::endian::little,
              "the block decoders assume a little-endian host");

namespace {

inline uint16_t read_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline float read_f16(const uint8_t* p) {
  return f16_to_f32(read_u16(p));
}

// Q4_0 block (18 B): d:f16 | qs[16]. Element j < 16 is the low nibble of qs[j], element
// j + 16 the high nibble; x = (q - 8) * d.
void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1 block (20 B): d:f16 | m:f16 | qs[16]; nibbles as Q4_0; x = q * d + m.
void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  const float m = read_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q8_0 block (34 B): d:f16 | qs:int8[32]; x = q * d.
void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  for (int j = 0; j < 32; ++j) {
    y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
  }
}

// Q4_K super-block (144 B): d:f16 | dmin:f16 | scales[12] | qs[128]. Eight sub-blocks of 32
// elements, each with a 6-bit scale and a 6-bit min packed into scales[12] (k_scale_min).
// qs is four 32-byte groups; group g holds sub-block 2g in its low nibbles and 2g + 1 in its
// high nibbles. x = (d * scale) * q - (dmin * min).
// Q5_K super-block (176 B): d:f16 | dmin:f16 | scales[12] | qh[32] | qs[128]. Scales, mins and
// the low four bits as Q4_K; the fifth bit of sub-block s's element l is bit s of qh[l].
template <bool kFifthBit>
void dequant_q45_k(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  const float dmin = read_f16(b + 2);
  const uint8_t* sc = b + 4;
  const uint8_t* qh = b + 16;  // Q5_K only
  const uint8_t* qs = b + (kFifthBit ? 48 : 16);
  for (int s = 0; s < 8; ++s) {
    int scale, min;
    k_scale_min(sc, s, &scale, &min);
    const float d1 = d * static_cast<float>(scale);
    const float m1 = dmin * static_cast<float>(min);
    const uint8_t* q = qs + 32 * (s / 2);
    const int shift = (s % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> shift) & 0x0F;
      if constexpr (kFifthBit) v |= ((qh[l] >> s) & 1) << 4;
      y[32 * s + l] = d1 * static_cast<float>(v) - m1;
    }
  }
}

// Q6_K super-block (210 B): ql[128] | qh[64] | scales:int8[16] | d:f16. Two halves of 128
// elements; half h uses ql[64h..], qh[32h..], scales[8h..]. For l in 0..31 the 6-bit values
//   y[l]      = (ql[l]      & 15) | ((qh[l] >> 0) & 3) << 4
//   y[l + 32] = (ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4
//   y[l + 64] = (ql[l]      >> 4) | ((qh[l] >> 4) & 3) << 4
//   y[l + 96] = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4
// are offset by -32; element i of the block uses scales[i / 16]; x = (d * scale) * q.
void dequant_q6_k(const uint8_t* b, float* y) {
  const float d = read_f16(b + 208);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b + 64 * h;
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
    float* out = y + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      out[l] = (d * static_cast<float>(scales[is + 0])) * static_cast<float>(q1);
      out[l + 32] = (d * static_cast<float>(scales[is + 2])) * static_cast<float>(q2);
      out[l + 64] = (d * static_cast<float>(scales[is + 4])) * static_cast<float>(q3);
      out[l + 96] = (d * static_cast<float>(scales[is + 6])) * static_cast<float>(q4);
    }
  }
}

// Q5_0 block (22 B): d:f16 | qh:u32 | qs[16]. Element j < 16 is the low nibble of qs[j] with
// bit j of qh as its fifth bit; element j + 16 the high nibble with bit j + 16; x = (q - 16) * d.
void dequant_q5_0(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = d * static_cast<float>(lo - 16);
    y[j + 16] = d * static_cast<float>(hi - 16);
  }
}

// Q5_1 block (24 B): d:f16 | m:f16 | qh:u32 | qs[16]; 5-bit q as Q5_0; x = d * q + m.
void dequant_q5_1(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  const float m = read_f16(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = d * static_cast<float>(lo) + m;
    y[j + 16] = d * static_cast<float>(hi) + m;
  }
}

// IQ4_NL block (18 B): d:f16 | qs[16]; nibbles as Q4_0 index the non-linear table
// kIq4nlValues; x = d * value.
void dequant_iq4_nl(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4nlValues[qs[j] & 0x0F]);
    y[j + 16] = d * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
  }
}

// Q2_K super-block (84 B): scales[16] | qs[64] | d:f16 | dmin:f16. Sixteen sub-blocks of 16;
// sub-block s has scale scales[s] & 15 and min scales[s] >> 4. Element e: half h = e / 128,
// shift j = (e % 128) / 32, l = e % 32: q = (qs[32h + l] >> 2j) & 3;
// x = (d * scale) * q - (dmin * min), s = e / 16.
void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const uint8_t* qs = b + 16;
  const float d = read_f16(b + 80);
  const float dmin = read_f16(b + 82);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 16;
    const int q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const float dl = d * static_cast<float>(sc[s] & 0x0F);
    const float ml = dmin * static_cast<float>(sc[s] >> 4);
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

// Q3_K super-block (110 B): hmask[32] | qs[64] | scales[12] | d:f16. Element e (h, j, l as
// Q2_K): low two bits (qs[32h + l] >> 2j) & 3, minus 4 when bit 4h + j of hmask[l] is clear;
// x = (d * scale) * q, s = e / 16.
void dequant_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = read_f16(b + 108);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int q = ((qs[32 * h + l] >> (2 * j)) & 3) - (((hm[l] >> (4 * h + j)) & 1) != 0 ? 0 : 4);
    const float dl = d * static_cast<float>(q3_k_scale(sc, e / 16));
    y[e] = dl * static_cast<float>(q);
  }
}

// IQ4_XS super-block (136 B): d:f16 | scales_h:u16 | scales_l[4] | qs[128]. Eight sub-blocks of
// 32; sub-block s's 6-bit scale is (scales_l[s / 2] >> 4(s % 2)) & 15 | ((scales_h >> 2s) & 3)
// << 4, offset by 32; its nibbles are qs[16s..16s + 16) as in IQ4_NL.
// x = (d * scale) * value.
void dequant_iq4_xs(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  const uint16_t sh = read_u16(b + 2);
  const uint8_t* sl = b + 4;
  const uint8_t* qs = b + 8;
  for (int s = 0; s < 8; ++s) {
    const int ls = ((sl[s / 2] >> (4 * (s % 2))) & 0x0F) | (((sh >> (2 * s)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[32 * s + j] = dl * static_cast<float>(kIq4nlValues[qs[16 * s + j] & 0x0F]);
      y[32 * s + j + 16] = dl * static_cast<float>(kIq4nlValues[qs[16 * s + j] >> 4]);
    }
  }
}

template <void (*Block)(const uint8_t*, float*)>
void dequant_blocks(DType t, const uint8_t* src, float* dst, int64_t n) {
  const int64_t be = dtype_block_elems(t);
  const int64_t bb = dtype_block_bytes(t);
  for (int64_t i = 0; i < n / be; ++i) Block(src + i * bb, dst + i * be);
}

// float -> IEEE half, round to nearest even (F16C, part of the x86-64-v3 build).
void write_f16(uint8_t* p, float f) {
  const uint16_t h = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
  std::memcpy(p, &h, 2);
}

void quant_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  write_f16(b, d);
  for (int j = 0; j < 32; ++j)
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
}

void quant_q4_0(const float* x, uint8_t* b) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  write_f16(b, d);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
    const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
    b[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void quant_q4_1(const float* x, uint8_t* b) {
  float min = x[0], max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  write_f16(b, d);
  write_f16(b + 2, min);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
    const int hi =
        std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
    b[4 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

}  // namespace

void quantize_row(DType t, const float* x, uint8_t* dst, int64_t n) {
  check(n >= 0 && n % dtype_block_elems(t) == 0, "{}: element count {} is not a multiple of {}",
        dtype_name(t), n, dtype_block_elems(t));
  void (*block)(const float*, uint8_t*) = nullptr;
  switch (t) {
    case DType::kQ8_0: block = quant_q8_0; break;
    case DType::kQ4_0: block = quant_q4_0; break;
    case DType::kQ4_1: block = quant_q4_1; break;
    default:
      throw_error("quantize_row: {} is not produced here (Q8_0, Q4_0 and Q4_1 are)",
                  dtype_name(t));
  }
  const int64_t bb = dtype_block_bytes(t);
  for (int64_t i = 0; i < n / 32; ++i) block(x + 32 * i, dst + bb * i);
}

void dequantize_row(DType t, const uint8_t* src, float* dst, int64_t n) {
  check(n >= 0 && n % dtype_block_elems(t) == 0, "{}: element count {} is not a multiple of {}",
        dtype_name(t), n, dtype_block_elems(t));
  switch (t) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(read_u16(src + 2 * i));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(read_u16(src + 2 * i));
      return;
    case DType::kQ4_0:
      return dequant_blocks<dequant_q4_0>(t, src, dst, n);
    case DType::kQ4_1:
      return dequant_blocks<dequant_q4_1>(t, src, dst, n);
    case DType::kQ8_0:
      return dequant_blocks<dequant_q8_0>(t, src, dst, n);
    case DType::kQ4_K:
      return dequant_blocks<dequant_q45_k<false>>(t, src, dst, n);
    case DType::kQ6_K:
      return dequant_blocks<dequant_q6_k>(t, src, dst, n);
    case DType::kQ5_0:
      return dequant_blocks<dequant_q5_0>(t, src, dst, n);
    case DType::kQ5_1:
      return dequant_blocks<dequant_q5_1>(t, src, dst, n);
    case DType::kIQ4_NL:
      return dequant_blocks<dequant_iq4_nl>(t, src, dst, n);
    case DType::kQ2_K:
      return dequant_blocks<dequant_q2_k>(t, src, dst, n);
    case DType::kQ3_K:
      return dequant_blocks<dequant_q3_k>(t, src, dst, n);
    case DType::kQ5_K:
      return dequant_blocks<dequant_q45_k<true>>(t, src, dst, n);
    case DType::kIQ4_XS:
      return dequant_blocks<dequant_iq4_xs>(t, src, dst, n);
    case DType::kF8E4M3:
    case DType::kF8E4M3B128:
    case DType::kF8E4M3G128: {
      // One FP8 row (core/fp8.h): dec(code) · weight scale, one fp32 product per element.
      const uint8_t* codes = fp8_row_codes(t, src, n);
      for (int64_t i = 0; i < n; ++i) {
        const float s = fp8_row_weight_scale(src, t == DType::kF8E4M3 ? 0 : i / kFp8ScaleBlock);
        dst[i] = fp8_e4m3_to_float(codes[i]) * s;
      }
      return;
    }
  }
  throw_error("dequantize_row: unknown dtype {}", static_cast<int>(t));
}

}  // namespace detllm
