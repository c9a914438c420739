// The device form of an FP8 weight matrix: what a backend whose memory is not host memory (CUDA)
// holds for the FP8 row types (core/fp8.h: kF8E4M3, kF8E4M3B128, kF8E4M3G128), because its GEMMs
// read codes and scales as separate arrays (16-byte copies of code rows) where the host form
// keeps them together in each row.
//
//   [codes: rows × cols E4M3, row r at r · cols][weight scales: rows × n_w fp32, row r's at
//   r · n_w][activation parameters: input_scale fp32, act_bound fp32]
//
// n_w = fp8_row_scales(t, cols) − 2: 1 for kF8E4M3 (the output channel's scale), ⌈cols / 128⌉
// for the block types (one a 128-column block of the row, DeepSeek's 128×128 blocks row by
// row). WeightMatrix::data points at the codes; the scales follow at fp8_device_scale_offset,
// the activation parameters — the rows' common input_scale and act_bound (core/fp8.h;
// 0 = dynamic, no bound), which the device quantizer reads — at fp8_device_params_offset. One
// activation rule for the whole matrix (the model places fused parts with different rules
// apart): fp8_device_split refuses every other matrix by name, so nothing is dropped silently.
// docs/cuda.md, "FP8 on the model".
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace detllm::kernels {

// The weight scales a row of type t holds in the device form (n_w above).
int64_t fp8_device_row_scales(DType t, int64_t cols);

// Byte offsets of the scales (rows · cols rounded up to 16) and of the activation parameters,
// and the whole size, for t's rows.
size_t fp8_device_scale_offset(DType t, int64_t rows, int64_t cols);
size_t fp8_device_params_offset(DType t, int64_t rows, int64_t cols);
size_t fp8_device_bytes(DType t, int64_t rows, int64_t cols);

// The device form (fp8_device_bytes(t, rows, cols) bytes at out) of `rows` host FP8 rows of
// type t and `cols` columns (dtype_row_bytes(t, cols) bytes each, back to back). Throws
// detllm::Error, naming what it refuses, for t not an FP8 row type, cols not a multiple of 16,
// rows whose input_scale or act_bound differ from row 0's, and a scale that is not finite (weight scales: and > 0; activation parameters: and ≥ 0).
void fp8_device_split(DType t, const uint8_t* host_rows, int64_t rows, int64_t cols,
                      uint8_t* out);

// Whether host FP8 rows a and b (each a matrix's first row) have the same activation rule
// (input_scale and act_bound): fused parts with different rules are placed apart on a device.
bool fp8_same_activation_rule(const uint8_t* row_a, const uint8_t* row_b);

// The host rows of a device form: fp8_device_split's inverse, for tests and for reading a device
// matrix back.
void fp8_device_join(DType t, const uint8_t* device_form, int64_t rows, int64_t cols,
                     uint8_t* host_rows);

}  // namespace detllm::kernels
