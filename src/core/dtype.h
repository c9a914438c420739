// Element types of weights and their conversion to fp32. f16/bf16 widen exactly. The block
// types are GGUF's quantized formats kept as they are in memory: a row of `cols` elements is
// cols / dtype_block_elems(t) packed blocks of dtype_block_bytes(t) bytes (core/quant.h
// decodes them, with the same fp32 bits as ggml's reference dequantizer).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace detllm {

// Append only: a value seeds its tensors' digest in the weights hash (model/model_loader.cpp),
// so a type keeps its number and existing fingerprints stay as they are.
enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ4_0,
  kQ4_1,
  kQ8_0,
  kQ4_K,
  kQ6_K,
  kQ5_0,
  kQ5_1,
  kIQ4_NL,
  kQ2_K,
  kQ3_K,
  kQ5_K,
  kIQ4_XS,
  // FP8 E4M3 weights with their scales in each row (core/fp8.h "FP8 rows"):
  kF8E4M3,      // one weight scale per row (output channel)
  kF8E4M3B128,  // one weight scale per 128-column block of the row (DeepSeek's 128x128 blocks)
  // The B128 row layout with activations scaled per 128-column group of each token as well
  // (transformers' quant_method "fp8": Qwen3-*-FP8, DeepSeek-V3; kernels/ref/fp8_linear.h).
  kF8E4M3G128,
};

inline std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ4_1: return "q4_1";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_K: return "q4_k";
    case DType::kQ6_K: return "q6_k";
    case DType::kQ5_0: return "q5_0";
    case DType::kQ5_1: return "q5_1";
    case DType::kIQ4_NL: return "iq4_nl";
    case DType::kQ2_K: return "q2_k";
    case DType::kQ3_K: return "q3_k";
    case DType::kQ5_K: return "q5_k";
    case DType::kIQ4_XS: return "iq4_xs";
    case DType::kF8E4M3: return "fp8_e4m3";
    case DType::kF8E4M3B128: return "fp8_e4m3_b128";
    case DType::kF8E4M3G128: return "fp8_e4m3_g128";
  }
  return "?";
}

// True for the FP8 row types (core/fp8.h): a row is a header of fp32 scales, then one E4M3
// code per element.
constexpr bool dtype_is_fp8(DType t) {
  return t == DType::kF8E4M3 || t == DType::kF8E4M3B128 || t == DType::kF8E4M3G128;
}

// True for the FP8 row types with one weight scale per 128 columns (B128, G128).
constexpr bool dtype_fp8_blocks(DType t) {
  return t == DType::kF8E4M3B128 || t == DType::kF8E4M3G128;
}

// The fp32 scales before an FP8 row's codes: the activation's static scale, its dynamic bound,
// then one weight scale (kF8E4M3) or one per 128 columns (kF8E4M3B128 / kF8E4M3G128, the last
// block partial).
constexpr int64_t fp8_row_scales(DType t, int64_t cols) {
  return 2 + (dtype_fp8_blocks(t) ? (cols + 127) / 128 : 1);
}

// True for the block (quantized) types, FP8 rows included.
constexpr bool dtype_is_block(DType t) {
  return t != DType::kF32 && t != DType::kF16 && t != DType::kBF16;
}

// Elements per block: 1 for f32/f16/bf16, 32 for the legacy quants and IQ4_NL, 256 for the
// k-quants and IQ4_XS.
constexpr int64_t dtype_block_elems(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: return 1;
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ8_0:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kIQ4_NL: return 32;
    case DType::kQ4_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ5_K:
    case DType::kIQ4_XS: return 256;
    case DType::kF8E4M3:
    case DType::kF8E4M3B128:
    case DType::kF8E4M3G128: return 1;  // a row: fp8_row_scales fp32 scales + one byte each
  }
  return 1;
}

// Bytes per block (ggml's block structs: q4_0 = d | qs[16], q4_1 = d | m | qs[16],
// q8_0 = d | qs[32], q5_0 = d | qh[4] | qs[16], q5_1 = d | m | qh[4] | qs[16],
// iq4_nl = d | qs[16], q2_K = scales[16] | qs[64] | d | dmin,
// q3_K = hmask[32] | qs[64] | scales[12] | d, q4_K = d | dmin | scales[12] | qs[128],
// q5_K = d | dmin | scales[12] | qh[32] | qs[128], q6_K = ql | qh | scales | d,
// iq4_xs = d | scales_h:u16 | scales_l[4] | qs[128]; d, dmin and m are f16).
constexpr int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kQ4_0: return 18;
    case DType::kQ4_1: return 20;
    case DType::kQ8_0: return 34;
    case DType::kQ4_K: return 144;
    case DType::kQ6_K: return 210;
    case DType::kQ5_0: return 22;
    case DType::kQ5_1: return 24;
    case DType::kIQ4_NL: return 18;
    case DType::kQ2_K: return 84;
    case DType::kQ3_K: return 110;
    case DType::kQ5_K: return 176;
    case DType::kIQ4_XS: return 136;
    case DType::kF8E4M3:
    case DType::kF8E4M3B128:
    case DType::kF8E4M3G128: return 1;  // the codes; dtype_row_bytes adds the row's scales
  }
  return 0;
}

// Bytes of a row of `cols` elements (cols a multiple of the block size).
constexpr int64_t dtype_row_bytes(DType t, int64_t cols) {
  if (dtype_is_fp8(t)) return 4 * fp8_row_scales(t, cols) + cols;
  return cols / dtype_block_elems(t) * dtype_block_bytes(t);
}

// Bytes per element of the element types (f32, f16, bf16); block types have no element size
// (use dtype_row_bytes).
inline size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 2; }

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// IEEE half -> float, exact, including subnormals, inf and NaN.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// float -> bf16 with round-to-nearest-even (NaN kept quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace detllm
