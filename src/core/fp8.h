// FP8 E4M3 ("e4m3fn", the OCP 8-bit float of FP8 checkpoints and Hopper's FP8 tensor cores):
// 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN, so the
// largest finite value is ±448 (S.1111.110); subnormals are m · 2^-9 (exponent field 0).
//
// fp8_e4m3_to_float: exact (every E4M3 value is a float).
// float_to_fp8_e4m3: round to nearest, ties to even mantissa, like PyTorch's
// `tensor.to(torch.float8_e4m3fn)`: a magnitude past 448 — infinities included — saturates to
// ±448 (the conversion FP8 checkpoints are made with clamps there first; so does the hardware's
// .satfinite conversion); NaN stays NaN with its sign (0x7F / 0xFF). Integer arithmetic on the
// float's bits only, so the result is the same on every machine and rounding mode.
// Tested against PyTorch's conversion (tests/data/fp8/e4m3_golden.json,
// scripts/ref/fp8_golden.py): every code, every tie, both sides of every tie.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace detllm {

inline constexpr float kFp8E4m3Max = 448.0f;

inline float fp8_e4m3_to_float(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu, mant = v & 0x7u;
  uint32_t bits;
  if ((v & 0x7fu) == 0x7fu) {
    bits = sign | 0x7fc00000u;  // NaN
  } else if (exp == 0) {
    // m · 2^-9, m = 0…7: exact as a float (a power of two times a small integer).
    float f = static_cast<float>(mant) * 0.001953125f;
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  } else {
    bits = sign | ((exp + 127u - 7u) << 23) | (mant << 20);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

inline uint8_t float_to_fp8_e4m3(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t exp_field = (bits >> 23) & 0xffu;
  const uint32_t frac = bits & 0x7fffffu;
  if (exp_field == 0xffu && frac != 0) return sign | 0x7fu;  // NaN
  if (exp_field == 0) return sign;  // zero or a float32 subnormal (< 2^-126): rounds to zero
  const int e = static_cast<int>(exp_field) - 127;  // x = 1.frac · 2^e
  if (e > 8) return sign | 0x7eu;                   // ≥ 512 or infinite: saturates to 448
  const uint32_t m24 = frac | 0x800000u;            // the 24-bit significand
  // Keep `keep` bits of precision below the leading one: 3 for a normal E4M3 result (e ≥ -6);
  // for a subnormal result (units of 2^-9) the value is m24 · 2^(e - 23 + 9).
  const int shift = e >= -6 ? 20 : 14 - e;  // bits of m24 dropped
  if (shift > 25) return sign;              // below half the smallest subnormal: zero
  const uint32_t kept = m24 >> shift;
  const uint32_t rest = m24 & ((1u << shift) - 1u), half = 1u << (shift - 1);
  const uint32_t rounded = kept + (rest > half || (rest == half && (kept & 1u)) ? 1u : 0u);
  uint32_t code;
  if (e >= -6) {
    // rounded = 8…16 (1.mmm in eighths); 16 carries into the next exponent.
    code = (static_cast<uint32_t>(e + 7) << 3) + (rounded - 8u);
  } else {
    code = rounded;  // 0…8 units of 2^-9; 8 is the smallest normal, 0x08
  }
  if (code > 0x7eu) code = 0x7eu;  // past 448 (rounded up to 480 or more): saturates
  return static_cast<uint8_t>(sign | code);
}

// ---- FP8 rows: the in-memory form of an FP8 weight matrix (DType::kF8E4M3, kF8E4M3B128) ----
// Each row of `cols` elements carries its own scales, so rows stay self-contained: fusing q/k/v
// or gate/up concatenates rows, the weights digest covers the scales, and a row can be read
// without the rest of the matrix. dtype_row_bytes(t, cols) bytes per row:
//   [input_scale f32][act_bound f32][weight scale f32 × n_w][E4M3 code × cols]
// n_w = 1 (kF8E4M3: the row's output channel; a per-tensor checkpoint scale is repeated on
// every row) or ceil(cols / 128) (kF8E4M3B128: column block b = columns [128 b, 128 b + 128);
// rows of one 128-row block of the checkpoint repeat its scales). input_scale > 0: the static
// activation scale of the checkpoint; 0: dynamic per token (kernels/ref/fp8_linear.h).
// act_bound > 0 caps a dynamic row's amax (fbgemm's activation_scale_ub); 0: no cap.
// Scales are stored unaligned (memcpy reads them): a row is 4 · (2 + n_w) + cols bytes.
inline constexpr int64_t kFp8ScaleBlock = 128;

inline float fp8_row_f32(const uint8_t* row, int64_t i) {
  float f;
  std::memcpy(&f, row + 4 * i, 4);
  return f;
}
inline float fp8_row_input_scale(const uint8_t* row) { return fp8_row_f32(row, 0); }
inline float fp8_row_act_bound(const uint8_t* row) { return fp8_row_f32(row, 1); }
// Weight scale j (0 for kF8E4M3; the column block for kF8E4M3B128).
inline float fp8_row_weight_scale(const uint8_t* row, int64_t j) { return fp8_row_f32(row, 2 + j); }
inline const uint8_t* fp8_row_codes(DType t, const uint8_t* row, int64_t cols) {
  return row + 4 * fp8_row_scales(t, cols);
}
inline void fp8_write_row_header(DType t, uint8_t* row, int64_t cols, float input_scale,
                                 float act_bound, const float* weight_scales) {
  std::memcpy(row, &input_scale, 4);
  std::memcpy(row + 4, &act_bound, 4);
  std::memcpy(row + 8, weight_scales, static_cast<size_t>(4 * (fp8_row_scales(t, cols) - 2)));
}

}  // namespace detllm
