// Block layouts and their scalar dequantization (see quant.h). Each block is read with memcpy
// (blocks are packed, so nothing is aligned).
#include "core/quant.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"

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
// elements, each with a 6-bit scale and a 6-bit min packed into scales[12]:
//   sub-block s < 4: scale = scales[s] & 63,  min = scales[s + 4] & 63
//   sub-block s >= 4: scale = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4
//                     min   = (scales[s + 4] >> 4) | (scales[s]     >> 6) << 4
// qs is four 32-byte groups; group g holds sub-block 2g in its low nibbles and 2g + 1 in its
// high nibbles. x = (d * scale) * q - (dmin * min).
void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = read_f16(b);
  const float dmin = read_f16(b + 2);
  const uint8_t* sc = b + 4;
  const uint8_t* qs = b + 16;
  for (int s = 0; s < 8; ++s) {
    int scale;
    int min;
    if (s < 4) {
      scale = sc[s] & 63;
      min = sc[s + 4] & 63;
    } else {
      scale = (sc[s + 4] & 0x0F) | ((sc[s - 4] >> 6) << 4);
      min = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
    const float d1 = d * static_cast<float>(scale);
    const float m1 = dmin * static_cast<float>(min);
    const uint8_t* q = qs + 32 * (s / 2);
    const int shift = (s % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      y[32 * s + l] = d1 * static_cast<float>((q[l] >> shift) & 0x0F) - m1;
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
      return dequant_blocks<dequant_q4_k>(t, src, dst, n);
    case DType::kQ6_K:
      return dequant_blocks<dequant_q6_k>(t, src, dst, n);
  }
  throw_error("dequantize_row: unknown dtype {}", static_cast<int>(t));
}

}  // namespace detllm
