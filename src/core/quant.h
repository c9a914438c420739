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

// dst[0..n) = the first n elements stored at src as type t (n a multiple of
// dtype_block_elems(t); src holds dtype_row_bytes(t, n) bytes, no alignment required).
// f32/f16/bf16 are widened exactly.
void dequantize_row(DType t, const uint8_t* src, float* dst, int64_t n);

// dst (dtype_row_bytes(t, n) bytes) = x[0..n) quantized to t by ggml's reference quantizers
// (quantize_row_*_ref): Q8_0 d = amax / 127, q = round(x / d); Q4_0 d = signed max / -8,
// q = min(15, trunc(x / d + 8.5)); Q4_1 d = (max - min) / 15, m = min,
// q = min(15, trunc((x - min) / d + 0.5)); d and m stored as f16. For tests and synthetic
// models; the k-quants (Q4_K, Q6_K) are not produced here (throws).
void quantize_row(DType t, const float* x, uint8_t* dst, int64_t n);

}  // namespace detllm
