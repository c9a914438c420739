// Shared by the FP8 model tests (tests/model/fp8_device_form_test.cpp,
// tests/cuda/cuda_fp8_model_test.cpp): a per-channel FP8 matrix turned into kF8E4M3B128 rows —
// the same codes, block b's weight scale (b + 1) × the channel's — so that a path which applied
// one scale to every block, or dropped the block scales, gives other numbers.
#pragma once

#include <cstring>
#include <vector>

#include "core/fp8.h"
#include "model/llama_weights.h"

namespace detllm::testing {

inline void to_block128_rows(HostTensor& t) {
  const DType b128 = DType::kF8E4M3B128;
  const int64_t rows = t.shape.at(0), cols = t.shape.at(1);
  std::vector<uint8_t> raw(static_cast<size_t>(rows * dtype_row_bytes(b128, cols)));
  std::vector<float> scales(static_cast<size_t>(fp8_row_scales(b128, cols) - 2));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = t.raw.data() + r * dtype_row_bytes(t.dtype, cols);
    uint8_t* dst = raw.data() + r * dtype_row_bytes(b128, cols);
    for (size_t j = 0; j < scales.size(); ++j)
      scales[j] = fp8_row_weight_scale(src, 0) * static_cast<float>(j + 1);
    fp8_write_row_header(b128, dst, cols, 0.0f, 0.0f, scales.data());
    std::memcpy(dst + 4 * fp8_row_scales(b128, cols), fp8_row_codes(t.dtype, src, cols),
                static_cast<size_t>(cols));
  }
  t.raw = std::move(raw);
  t.dtype = b128;
}

}  // namespace detllm::testing
