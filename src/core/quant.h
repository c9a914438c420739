// Decoding of the block (GGUF-quantized) weight types of core/dtype.h to fp32: the one scalar
// definition of every block layout, used by the GGUF loader (formats/dequant), the reference
// backend (kernels/ref) and as the bit-exact model of the CPU kernels' in-register decoding
// (kernels/cpu/quant_decode.h). The arithmetic per element follows ggml's reference
// dequantizer in order and rounding (the build has -ffp-contract=off: no FMA contracts it).
// Test: build/tests/test_formats --gtest_filter='Dequant*' (against the gguf Python package).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace detllm {

// The non-linear 4-bit code book of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl): nibble v stands
// for kIq4nlValues[v] times the block's scale.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// The 6-bit scale and min of sub-block s (0..7) of a Q4_K or Q5_K super-block, packed in its
// scales[12]:
//   s < 4:  scale = scales[s] & 63,  min = scales[s + 4] & 63
//   s >= 4: scale = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4
//           min   = (scales[s + 4] >> 4) | (scales[s]     >> 6) << 4
inline void k_scale_min(const uint8_t* sc, int s, int* scale, int* min) {
  if (s < 4) {
    *scale = sc[s] & 63;
    *min = sc[s + 4] & 63;
  } else {
    *scale = (sc[s + 4] & 0x0F) | ((sc[s - 4] >> 6) << 4);
    *min = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
  }
}

// The sixteen 6-bit scales of a Q3_K block, packed in scales[12]: scale s has its low four bits
// in scales[s % 8] (low nibble for s < 8, high for s >= 8) and its top two bits in
// scales[8 + s % 4] at bit 2 * (s / 4); stored offset by 32.
inline int q3_k_scale(const uint8_t* sc, int s) {
  const int lo = (sc[s % 8] >> (4 * (s / 8))) & 0x0F;
  const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

// dst[0..n) = the first n elements stored at src as type t (n a multiple of
// dtype_block_elems(t); src holds dtype_row_bytes(t, n) bytes, no alignment required).
// f32/f16/bf16 are widened exactly.
void dequantize_row(DType t, const uint8_t* src, float* dst, int64_t n);

// dst (dtype_row_bytes(t, n) bytes) = x[0..n) quantized to t by ggml's reference quantizers
// (quantize_row_*_ref): Q8_0 d = amax / 127, q = round(x / d); Q4_0 d = signed max / -8,
// q = min(15, trunc(x / d + 8.5)); Q4_1 d = (max - min) / 15, m = min,
// q = min(15, trunc((x - min) / d + 0.5)); d and m stored as f16. For tests and synthetic
// models; the other types (Q5_0, Q5_1, the k-quants, IQ4_NL, IQ4_XS) are not produced here
// (throws).
void quantize_row(DType t, const float* x, uint8_t* dst, int64_t n);

}  // namespace detllm
