// A plain host reference of the CUDA FP8 kernels (kernels/cuda/fp8_*.cu) for their tests: the
// per-row activation quantizer, the FP8 GEMM's exact sum and the FP8 KV append and read, on
// the host codec (core/fp8.h). Deliberately small and obvious; the library's CPU path of the
// same arithmetic lives in src/kernels (the two references are to be unified).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/fp8.h"

namespace detllm::kernels::fp8_ref {

// Row x (k) → codes q (k); returns the row's scale: amax / 448 (amax = max |x[i]|, NaN
// ignored), 1 when that is 0 (amax 0 or below 448 · 2^-149); q[i] = e4m3(x[i] / scale), one
// float division.
inline float quantize_row(const float* x, int64_t k, uint8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < k; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]);  // false for NaN: ignored
  float s = amax / kFp8E4m3Max;
  s = s == 0.0f ? 1.0f : s;
  for (int64_t i = 0; i < k; ++i) q[i] = float_to_fp8_e4m3(x[i] / s);
  return s;
}

// The GEMM's element (r, c) in double: the exact Σ_k dec(xq)·dec(w) (every product of two E4M3
// values is exact, and their sum spans < 53 bits for k < 2^15: exact too), then the scales,
// plus the Σ |products| that the accumulation error is bounded by.
struct GemmElement {
  double value = 0, abs_sum = 0, sum = 0;
};
inline GemmElement gemm_element(const uint8_t* xq_row, float x_scale, const uint8_t* w_row,
                                float w_scale, int64_t k, float bias) {
  GemmElement e;
  for (int64_t i = 0; i < k; ++i) {
    const double p = double(fp8_e4m3_to_float(xq_row[i])) * double(fp8_e4m3_to_float(w_row[i]));
    e.sum += p;
    e.abs_sum += std::fabs(p);
  }
  e.value = e.sum * x_scale * w_scale + bias;
  return e;
}

// The stated bound of the tensor-core sum against the exact one, in the units of y:
// 4 (k + 64) u Σ|p| (the invariant bf16 GEMM's bound, tests/cuda/cuda_backend_ops_test.cpp)
// plus the epilogue's two products and the bias (4 u |y|), u = 2^-24.
inline double gemm_tolerance(const GemmElement& e, float x_scale, float w_scale, int64_t k) {
  const double u = std::ldexp(1.0, -24);
  return 4.0 * double(k + 64) * u * e.abs_sum * std::fabs(double(x_scale) * w_scale) +
         4.0 * u * std::fabs(e.value) + 1e-30;
}

// The stated bound of the FP8 wgmma GEMM (fp8_gemm_wg.cuh): inside each 128-k block four k32
// wgmmas in an accumulator of ~14 significant bits (DeepSeek-V3; SageAttention2's FP22),
// taken as ≤ 4 · 2^-12 Σ|p| of the block (a truncating unit 2^-13, twice), then the blocks'
// fp32 adds ((k / 128 + 2) u Σ|p|), then the epilogue (4 u |y|).
inline double gemm_wg_tolerance(const GemmElement& e, float x_scale, float w_scale, int64_t k) {
  const double u = std::ldexp(1.0, -24);
  const double chain = 4.0 * std::ldexp(1.0, -12) + double(k / 128 + 2) * u;
  return chain * e.abs_sum * std::fabs(double(x_scale) * w_scale) + 4.0 * u * std::fabs(e.value) +
         1e-30;
}

// FP8 KV: code = e4m3(x / scale) (one float division); read = dec(code) · scale (one float
// product).
inline uint8_t kv_code(float x, float scale) { return float_to_fp8_e4m3(x / scale); }
inline float kv_value(uint8_t code, float scale) { return fp8_e4m3_to_float(code) * scale; }

}  // namespace detllm::kernels::fp8_ref
