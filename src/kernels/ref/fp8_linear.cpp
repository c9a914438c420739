#include "kernels/ref/fp8_linear.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/fp8.h"

namespace detllm::kernels::ref {

float fp8_activation_scale(const float* x, int64_t k, float input_scale, float act_bound) {
  if (input_scale > 0.0f) return input_scale;
  float a = 0.0f;
  for (int64_t i = 0; i < k; ++i) a = std::max(a, std::fabs(x[i]));
  if (act_bound > 0.0f) a = std::min(a, act_bound);
  const float s = a / kFp8E4m3Max;
  return s == 0.0f ? 1.0f : s;
}

void fp8_quantize_activation(const float* x, int64_t k, float s_x, uint8_t* q) {
  for (int64_t i = 0; i < k; ++i) q[i] = float_to_fp8_e4m3(x[i] / s_x);
}

void fp8_quantize_activation_groups(const float* x, int64_t k, float input_scale,
                                    float act_bound, uint8_t* q, float* s) {
  for (int64_t b0 = 0; b0 < k; b0 += kFp8ScaleBlock) {
    const int64_t len = std::min(kFp8ScaleBlock, k - b0);
    const float sg = fp8_activation_scale(x + b0, len, input_scale, act_bound);
    fp8_quantize_activation(x + b0, len, sg, q + b0);
    s[b0 / kFp8ScaleBlock] = sg;
  }
}

float fp8_dot_g128(const uint8_t* q, const float* s_g, const uint8_t* row, int64_t k) {
  const uint8_t* w = fp8_row_codes(DType::kF8E4M3G128, row, k);
  float acc = 0.0f;
  for (int64_t b0 = 0; b0 < k; b0 += kFp8ScaleBlock) {
    float part = 0.0f;
    for (int64_t i = b0; i < std::min(k, b0 + kFp8ScaleBlock); ++i) {
      part += fp8_e4m3_to_float(q[i]) * fp8_e4m3_to_float(w[i]);
    }
    const int64_t b = b0 / kFp8ScaleBlock;
    acc += part * s_g[b] * fp8_row_weight_scale(row, b);
  }
  return acc;
}

float fp8_dot(DType t, const uint8_t* q, float s_x, const uint8_t* row, int64_t k) {
  const uint8_t* w = fp8_row_codes(t, row, k);
  if (t == DType::kF8E4M3) {
    float acc = 0.0f;
    for (int64_t i = 0; i < k; ++i) acc += fp8_e4m3_to_float(q[i]) * fp8_e4m3_to_float(w[i]);
    return acc * s_x * fp8_row_weight_scale(row, 0);
  }
  check(t == DType::kF8E4M3B128, "fp8_dot: {} is not an FP8 type", dtype_name(t));
  float acc = 0.0f;
  for (int64_t b0 = 0; b0 < k; b0 += kFp8ScaleBlock) {
    float part = 0.0f;
    for (int64_t i = b0; i < std::min(k, b0 + kFp8ScaleBlock); ++i) {
      part += fp8_e4m3_to_float(q[i]) * fp8_e4m3_to_float(w[i]);
    }
    acc += part * fp8_row_weight_scale(row, b0 / kFp8ScaleBlock);
  }
  return acc * s_x;
}

void fp8_linear(const float* x, int32_t m, const WeightMatrix& w, const float* bias, float* y) {
  check(dtype_is_fp8(w.dtype), "fp8_linear: weight dtype {} is not FP8", dtype_name(w.dtype));
  const int64_t k = w.cols, row_bytes = dtype_row_bytes(w.dtype, k);
  const auto* wp = static_cast<const uint8_t*>(w.data);
  const bool groups = w.dtype == DType::kF8E4M3G128;
  std::vector<uint8_t> q(static_cast<size_t>(k));
  std::vector<float> s_g(static_cast<size_t>((k + kFp8ScaleBlock - 1) / kFp8ScaleBlock));
  for (int32_t i = 0; i < m; ++i) {
    const float* xi = x + static_cast<int64_t>(i) * k;
    // Rows of one matrix may differ in input scale (q, k and v fused): quantize per row's own.
    float last_in = -1.0f, last_bound = -1.0f, s_x = 0.0f;
    for (int64_t n = 0; n < w.rows; ++n) {
      const uint8_t* row = wp + n * row_bytes;
      const float in = fp8_row_input_scale(row), bound = fp8_row_act_bound(row);
      if (in != last_in || bound != last_bound) {
        if (groups) {
          fp8_quantize_activation_groups(xi, k, in, bound, q.data(), s_g.data());
        } else {
          s_x = fp8_activation_scale(xi, k, in, bound);
          fp8_quantize_activation(xi, k, s_x, q.data());
        }
        last_in = in;
        last_bound = bound;
      }
      float v = groups ? fp8_dot_g128(q.data(), s_g.data(), row, k)
                       : fp8_dot(w.dtype, q.data(), s_x, row, k);
      if (bias != nullptr) v += bias[n];
      y[static_cast<int64_t>(i) * w.rows + n] = v;
    }
  }
}

void fp8_quantize_weight_row(const float* w, int64_t cols, uint8_t* dst) {
  float a = 0.0f;
  for (int64_t i = 0; i < cols; ++i) a = std::max(a, std::fabs(w[i]));
  float s = a / kFp8E4m3Max;
  if (s == 0.0f) s = 1.0f;
  fp8_write_row_header(DType::kF8E4M3, dst, cols, 0.0f, 0.0f, &s);
  uint8_t* codes = dst + 4 * fp8_row_scales(DType::kF8E4M3, cols);
  for (int64_t i = 0; i < cols; ++i) codes[i] = float_to_fp8_e4m3(w[i] / s);
}

float fp8_kv_round(float v, float s) { return fp8_e4m3_to_float(float_to_fp8_e4m3(v / s)) * s; }

}  // namespace detllm::kernels::ref
