// The device form of an FP8 weight matrix: what a backend whose memory is not host memory (CUDA)
// holds for DType::kF8E4M3, because its GEMMs read codes and scales as separate arrays (16-byte
// copies of code rows) where the host form keeps them together in each row (core/fp8.h).
//
//   [codes: rows × cols E4M3, row r at r · cols][weight scales: rows fp32]
//
// WeightMatrix::data points at the codes; the scales follow at fp8_device_scale_offset. The
// device form holds the CUDA FP8 class only — per-channel weight scales (kF8E4M3) and dynamic
// per-token activations without a bound (input_scale 0, act_bound 0): fp8_device_split refuses
// every other row by name, so nothing is dropped silently. docs/cuda.md, "FP8 on the model".
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace detllm::kernels {

// Byte offset of the scales (rows · cols rounded up to 16) and the whole size.
size_t fp8_device_scale_offset(int64_t rows, int64_t cols);
size_t fp8_device_bytes(int64_t rows, int64_t cols);

// The device form (fp8_device_bytes(rows, cols) bytes at out) of `rows` host FP8 rows of type t
// and `cols` columns (dtype_row_bytes(t, cols) bytes each, back to back). Throws detllm::Error,
// naming what it refuses, for t other than kF8E4M3, cols not a multiple of 16, a row with a
// static input scale or an activation bound, and a weight scale that is not finite and > 0.
void fp8_device_split(DType t, const uint8_t* host_rows, int64_t rows, int64_t cols,
                      uint8_t* out);

// The host rows of a device form (input_scale 0, act_bound 0): fp8_device_split's inverse,
// for tests and for reading a device matrix back.
void fp8_device_join(const uint8_t* device_form, int64_t rows, int64_t cols, uint8_t* host_rows);

}  // namespace detllm::kernels
