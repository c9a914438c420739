// See fp8_device_matrix.h: the host-side split of FP8 rows into the device form and back.
#include "kernels/fp8_device_matrix.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp8.h"

namespace detllm::kernels {

int64_t fp8_device_row_scales(DType t, int64_t cols) { return fp8_row_scales(t, cols) - 2; }

size_t fp8_device_scale_offset(DType /*t*/, int64_t rows, int64_t cols) {
  const size_t codes = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  return (codes + 15) / 16 * 16;
}

size_t fp8_device_params_offset(DType t, int64_t rows, int64_t cols) {
  return fp8_device_scale_offset(t, rows, cols) +
         sizeof(float) * static_cast<size_t>(rows * fp8_device_row_scales(t, cols));
}

size_t fp8_device_bytes(DType t, int64_t rows, int64_t cols) {
  return fp8_device_params_offset(t, rows, cols) + 2 * sizeof(float);
}

bool fp8_same_activation_rule(const uint8_t* row_a, const uint8_t* row_b) {
  return std::memcmp(row_a, row_b, 8) == 0;  // [input_scale][act_bound], bit for bit
}

void fp8_device_split(DType t, const uint8_t* host_rows, int64_t rows, int64_t cols,
                      uint8_t* out) {
  check(dtype_is_fp8(t), "FP8 on a device backend: weights of type {} are not FP8 rows ({}, {} or "
        "{})", dtype_name(t), dtype_name(DType::kF8E4M3), dtype_name(DType::kF8E4M3B128),
        dtype_name(DType::kF8E4M3G128));
  check(rows >= 1 && cols > 0 && cols % 16 == 0,
        "FP8 on a device backend: a {}×{} matrix; its FP8 GEMMs need columns in multiples of 16",
        rows, cols);
  const int64_t rb = dtype_row_bytes(t, cols), nw = fp8_device_row_scales(t, cols);
  const float input_scale = fp8_row_input_scale(host_rows), bound = fp8_row_act_bound(host_rows);
  check(std::isfinite(input_scale) && input_scale >= 0.0f && std::isfinite(bound) &&
            bound >= 0.0f,
        "FP8 on a device backend: input scale {} and activation bound {}", input_scale, bound);
  uint8_t* codes = out;
  uint8_t* scales = out + fp8_device_scale_offset(t, rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = host_rows + r * rb;
    check(fp8_same_activation_rule(row, host_rows),
          "FP8 on a device backend: row {} quantizes its input with static scale {} / bound {}, "
          "row 0 with {} / {}; one matrix's activations are quantized once, by one rule",
          r, fp8_row_input_scale(row), fp8_row_act_bound(row), input_scale, bound);
    for (int64_t j = 0; j < nw; ++j) {
      const float s = fp8_row_weight_scale(row, j);
      check(std::isfinite(s) && s > 0.0f,
            "FP8 on a device backend: row {} has weight scale {} (block {})", r, s, j);
      std::memcpy(scales + 4 * (r * nw + j), &s, 4);
    }
    std::memcpy(codes + r * cols, fp8_row_codes(t, row, cols), static_cast<size_t>(cols));
  }
  const size_t pad = fp8_device_scale_offset(t, rows, cols) - static_cast<size_t>(rows * cols);
  if (pad > 0) std::memset(codes + rows * cols, 0, pad);
  uint8_t* params = out + fp8_device_params_offset(t, rows, cols);
  std::memcpy(params, &input_scale, 4);
  std::memcpy(params + 4, &bound, 4);
}

void fp8_device_join(DType t, const uint8_t* device_form, int64_t rows, int64_t cols,
                     uint8_t* host_rows) {
  const int64_t rb = dtype_row_bytes(t, cols), nw = fp8_device_row_scales(t, cols);
  const uint8_t* scales = device_form + fp8_device_scale_offset(t, rows, cols);
  const uint8_t* params = device_form + fp8_device_params_offset(t, rows, cols);
  float input_scale, bound;
  std::memcpy(&input_scale, params, 4);
  std::memcpy(&bound, params + 4, 4);
  std::vector<float> s(static_cast<size_t>(nw));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(s.data(), scales + 4 * r * nw, 4 * static_cast<size_t>(nw));
    uint8_t* row = host_rows + r * rb;
    fp8_write_row_header(t, row, cols, input_scale, bound, s.data());
    std::memcpy(row + 4 * fp8_row_scales(t, cols), device_form + r * cols,
                static_cast<size_t>(cols));
  }
}

}  // namespace detllm::kernels
