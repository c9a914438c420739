// Block layouts and dequantization of GGML types. Each quantized block is decoded by reading
// its bytes with memcpy (blocks are packed, so nothing is aligned). The arithmetic per element
// follows ggml's reference order (e.g. Q4_K: (d * scale) * q - (dmin * min)); the build uses
// -ffp-contract=off, so no FMA changes the rounding.
#include "formats/dequant.h"

#include <array>
#include <bit>
#include <cstring>

#include "core/error.h"

namespace detllm {

static_assert(std::endian::native == std::endian::little,
              "the loaders assume a little-endian host");

namespace {

constexpr int64_t kQK = 32;     // elements per block of the legacy quants (Q4_0, Q4_1, Q8_0)
constexpr int64_t kQK_K = 256;  // elements per super-block of the k-quants

// Every type ggml knows (gguf constants GGML_QUANT_SIZES); ids 4, 5, 31-33, 36-38 are retired.
constexpr std::array<GgmlTypeInfo, 34> kTypes = {{
    {0, "F32", 1, 4, true},
    {1, "F16", 1, 2, true},
    {2, "Q4_0", kQK, 2 + 16, true},
    {3, "Q4_1", kQK, 2 + 2 + 16, true},
    {6, "Q5_0", kQK, 2 + 4 + 16, false},
    {7, "Q5_1", kQK, 2 + 2 + 4 + 16, false},
    {8, "Q8_0", kQK, 2 + 32, true},
    {9, "Q8_1", kQK, 4 + 4 + 32, false},
    {10, "Q2_K", kQK_K, 2 + 2 + kQK_K / 16 + kQK_K / 4, false},
    {11, "Q3_K", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + 12, false},
    {12, "Q4_K", kQK_K, 2 + 2 + 12 + kQK_K / 2, true},
    {13, "Q5_K", kQK_K, 2 + 2 + 12 + kQK_K / 2 + kQK_K / 8, false},
    {14, "Q6_K", kQK_K, kQK_K / 2 + kQK_K / 4 + kQK_K / 16 + 2, true},
    {15, "Q8_K", kQK_K, 4 + kQK_K + kQK_K / 8, false},
    {16, "IQ2_XXS", kQK_K, 2 + kQK_K / 4, false},
    {17, "IQ2_XS", kQK_K, 2 + kQK_K / 4 + kQK_K / 32, false},
    {18, "IQ3_XXS", kQK_K, 2 + kQK_K / 4 + kQK_K / 8, false},
    {19, "IQ1_S", kQK_K, 2 + kQK_K / 8 + kQK_K / 16, false},
    {20, "IQ4_NL", kQK, 2 + 16, false},
    {21, "IQ3_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + kQK_K / 32 + 4, false},
    {22, "IQ2_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 16, false},
    {23, "IQ4_XS", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 64, false},
    {24, "I8", 1, 1, false},
    {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},
    {27, "I64", 1, 8, false},
    {28, "F64", 1, 8, false},
    {29, "IQ1_M", kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32, false},
    {30, "BF16", 1, 2, true},
    {34, "TQ1_0", kQK_K, 2 + 4 * 13, false},
    {35, "TQ2_0", kQK_K, 2 + 64, false},
    {39, "MXFP4", kQK, 1 + 16, false},
    {40, "NVFP4", 64, 4 + 32, false},
    {41, "Q1_0", 128, 2 + 16, false},
}};

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
void dequant_blocks(const uint8_t* src, float* dst, int64_t n, int64_t block_size,
                    int64_t type_size) {
  const int64_t n_blocks = n / block_size;
  for (int64_t i = 0; i < n_blocks; ++i) Block(src + i * type_size, dst + i * block_size);
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

std::string ggml_type_name(uint32_t id) {
  const GgmlTypeInfo* t = ggml_type_info(id);
  return t != nullptr ? std::string(t->name) : fmt::format("unknown type {}", id);
}

void dequantize_ggml(uint32_t type, const uint8_t* src, float* dst, int64_t n) {
  const GgmlTypeInfo* t = ggml_type_info(type);
  check(t != nullptr && t->can_dequantize,
        "cannot dequantize GGML type {} (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)",
        ggml_type_name(type));
  check(n >= 0 && n % t->block_size == 0, "{} element count {} is not a multiple of {}", t->name, n,
        t->block_size);
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      widen_to_f32(DType::kF32, src, dst, n);
      return;
    case GgmlType::kF16:
      widen_to_f32(DType::kF16, src, dst, n);
      return;
    case GgmlType::kBF16:
      widen_to_f32(DType::kBF16, src, dst, n);
      return;
    case GgmlType::kQ4_0:
      dequant_blocks<dequant_q4_0>(src, dst, n, t->block_size, t->type_size);
      return;
    case GgmlType::kQ4_1:
      dequant_blocks<dequant_q4_1>(src, dst, n, t->block_size, t->type_size);
      return;
    case GgmlType::kQ8_0:
      dequant_blocks<dequant_q8_0>(src, dst, n, t->block_size, t->type_size);
      return;
    case GgmlType::kQ4_K:
      dequant_blocks<dequant_q4_k>(src, dst, n, t->block_size, t->type_size);
      return;
    case GgmlType::kQ6_K:
      dequant_blocks<dequant_q6_k>(src, dst, n, t->block_size, t->type_size);
      return;
  }
  throw_error("cannot dequantize GGML type {}", ggml_type_name(type));  // unreachable
}

void widen_to_f32(DType dtype, const uint8_t* src, float* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(read_u16(src + 2 * i));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(read_u16(src + 2 * i));
      return;
  }
  throw_error("cannot widen dtype {} to f32", dtype_name(dtype));  // unreachable
}

}  // namespace detllm
