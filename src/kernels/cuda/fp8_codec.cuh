// The E4M3 codec on the device: the same integer operations as the host's (core/fp8.h), so a
// value encodes to the same code on both sides whatever the rounding mode — round to nearest
// even, a magnitude past 448 (infinities too) saturating to ±448, NaN to S.1111.111, float32
// subnormals to a signed zero. The hardware conversion (cvt.rn.satfinite.e4m3x2.f32) is not
// used: its NaN and signed-zero codes are the hardware's, not the host's.
// Tested against the host codec on every bf16 pattern, every tie ±1 ulp and random floats
// (tests/cuda/cuda_fp8_test.cpp, CudaFp8.DeviceCodecIsTheHostCodec).
#pragma once

#include <cstdint>

namespace detllm::kernels::cuda::fp8 {

inline constexpr float kE4m3Max = 448.0f;  // = detllm::kFp8E4m3Max (core/fp8.h)
// The columns of one activation scale group (kF8E4M3G128) = detllm::kFp8ScaleBlock (core/fp8.h).
inline constexpr int kE4m3GroupCols = 128;

__device__ __forceinline__ uint8_t encode_e4m3(float x) {
  const uint32_t bits = __float_as_uint(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t exp_field = (bits >> 23) & 0xffu;
  const uint32_t frac = bits & 0x7fffffu;
  if (exp_field == 0xffu && frac != 0) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  if (exp_field == 0) return static_cast<uint8_t>(sign);  // zero or a float32 subnormal
  const int e = static_cast<int>(exp_field) - 127;
  if (e > 8) return static_cast<uint8_t>(sign | 0x7eu);  // ≥ 512 or infinite: 448
  const uint32_t m24 = frac | 0x800000u;
  const int shift = e >= -6 ? 20 : 14 - e;  // bits of the significand dropped
  if (shift > 25) return static_cast<uint8_t>(sign);  // below half the smallest subnormal
  const uint32_t kept = m24 >> shift;
  const uint32_t rest = m24 & ((1u << shift) - 1u), half = 1u << (shift - 1);
  const uint32_t rounded = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
  uint32_t code = e >= -6 ? (static_cast<uint32_t>(e + 7) << 3) + (rounded - 8u) : rounded;
  if (code > 0x7eu) code = 0x7eu;  // rounded past 448: saturates
  return static_cast<uint8_t>(sign | code);
}

// Exact: every E4M3 value is a float (NaN codes give a NaN).
__device__ __forceinline__ float decode_e4m3(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu, mant = v & 0x7u;
  if ((v & 0x7fu) == 0x7fu) return __uint_as_float(sign | 0x7fc00000u);
  if (exp == 0) return __uint_as_float(__float_as_uint(static_cast<float>(mant) * 0.001953125f) | sign);
  return __uint_as_float(sign | ((exp + 120u) << 23) | (mant << 20));
}

// Two E4M3 codes (low byte = lower index) as an f16 pair, low half = lower index: exact (f16
// holds every E4M3 value: 5 exponent bits reach 2^-24 and 65504). The tensor-core operand
// conversion of the FP8 GEMM (fp8_gemm.cuh).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint16_t two) {
  uint32_t out;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(out) : "h"(two));
  return out;
}

}  // namespace detllm::kernels::cuda::fp8
