// GGML type table and dequantization of GGML types: the block decoders themselves are
// core/quant (shared with the kernels), reached through the DType each GGML type maps to.
#include "formats/dequant.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"
#include "core/quant.h"

namespace detllm {

namespace {

constexpr int64_t kQK = 32;     // elements per block of the legacy quants (Q4_0, Q4_1, Q8_0)
constexpr int64_t kQK_K = 256;  // elements per super-block of the k-quants

// Every type ggml knows (gguf constants GGML_QUANT_SIZES); ids 4, 5, 31-33, 36-38 are retired.
constexpr std::array<GgmlTypeInfo, 34> kTypes = {{
    {0, "F32", 1, 4, true},
    {1, "F16", 1, 2, true},
    {2, "Q4_0", kQK, 2 + 16, true},
    {3, "Q4_1", kQK, 2 + 2 + 16, true},
    {6, "Q5_0", kQK, 2 + 4 + 16, true},
    {7, "Q5_1", kQK, 2 + 2 + 4 + 16, true},
    {8, "Q8_0", kQK, 2 + 32, true},
    {9, "Q8_1", kQK, 4 + 4 + 32, false},
    {10, "Q2_K", kQK_K, 2 + 2 + kQK_K / 16 + kQK_K / 4, true},
    {11, "Q3_K", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + 12, true},
    {12, "Q4_K", kQK_K, 2 + 2 + 12 + kQK_K / 2, true},
    {13, "Q5_K", kQK_K, 2 + 2 + 12 + kQK_K / 2 + kQK_K / 8, true},
    {14, "Q6_K", kQK_K, kQK_K / 2 + kQK_K / 4 + kQK_K / 16 + 2, true},
    {15, "Q8_K", kQK_K, 4 + kQK_K + kQK_K / 8, false},
    {16, "IQ2_XXS", kQK_K, 2 + kQK_K / 4, false},
    {17, "IQ2_XS", kQK_K, 2 + kQK_K / 4 + kQK_K / 32, false},
    {18, "IQ3_XXS", kQK_K, 2 + kQK_K / 4 + kQK_K / 8, false},
    {19, "IQ1_S", kQK_K, 2 + kQK_K / 8 + kQK_K / 16, false},
    {20, "IQ4_NL", kQK, 2 + 16, true},
    {21, "IQ3_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + kQK_K / 32 + 4, false},
    {22, "IQ2_S", kQK_K, 2 + kQK_K / 4 + kQK_K / 16, false},
    {23, "IQ4_XS", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 64, true},
    {24, "I8", 1, 1, false},
    {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},
    {27, "I64", 1, 8, false},
    {28, "F64", 1, 8, false},
    {29, "IQ1_M", kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32, false},
    {30, "BF16", 1, 2, true},
    {34, "TQ1_0", kQK_K, 2 + 4 * 13, false},
    {35, "TQ2_0", kQK_K, 2 + 64, false},
    {39, "MXFP4", kQK, 1 + 16, false},
    {40, "NVFP4", 64, 4 + 32, false},
    {41, "Q1_0", 128, 2 + 16, false},
}};

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

std::string ggml_type_name(uint32_t id) {
  const GgmlTypeInfo* t = ggml_type_info(id);
  return t != nullptr ? std::string(t->name) : fmt::format("unknown type {}", id);
}

void dequantize_ggml(uint32_t type, const uint8_t* src, float* dst, int64_t n) {
  const GgmlTypeInfo* t = ggml_type_info(type);
  check(t != nullptr && t->can_dequantize,
        "cannot dequantize GGML type {} (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, "
        "Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS)",
        ggml_type_name(type));
  check(n >= 0 && n % t->block_size == 0, "{} element count {} is not a multiple of {}", t->name, n,
        t->block_size);
  const std::optional<DType> dt = ggml_dtype(type);
  check(dt.has_value(), "cannot dequantize GGML type {}", ggml_type_name(type));
  dequantize_row(*dt, src, dst, n);
}

std::optional<DType> ggml_dtype(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: return DType::kF32;
    case GgmlType::kF16: return DType::kF16;
    case GgmlType::kBF16: return DType::kBF16;
    case GgmlType::kQ4_0: return DType::kQ4_0;
    case GgmlType::kQ4_1: return DType::kQ4_1;
    case GgmlType::kQ8_0: return DType::kQ8_0;
    case GgmlType::kQ4_K: return DType::kQ4_K;
    case GgmlType::kQ6_K: return DType::kQ6_K;
    case GgmlType::kQ5_0: return DType::kQ5_0;
    case GgmlType::kQ5_1: return DType::kQ5_1;
    case GgmlType::kQ2_K: return DType::kQ2_K;
    case GgmlType::kQ3_K: return DType::kQ3_K;
    case GgmlType::kQ5_K: return DType::kQ5_K;
    case GgmlType::kIQ4_NL: return DType::kIQ4_NL;
    case GgmlType::kIQ4_XS: return DType::kIQ4_XS;
  }
  return std::nullopt;
}

void widen_to_f32(DType dtype, const uint8_t* src, float* dst, int64_t n) {
  check(!dtype_is_block(dtype), "widen_to_f32: {} is a block type", dtype_name(dtype));
  dequantize_row(dtype, src, dst, n);
}

void dequantize_tensor(HostTensor& t) {
  if (t.dtype == DType::kF32) return;
  const int64_t n = t.numel();
  const int64_t cols = t.shape.empty() ? n : t.shape.back();
  const int64_t rows = cols == 0 ? 0 : n / cols;
  const int64_t row_bytes = dtype_row_bytes(t.dtype, cols);
  check(static_cast<int64_t>(t.raw.size()) == rows * row_bytes,
        "dequantize_tensor: {} bytes for {} elements of {}", t.raw.size(), n, dtype_name(t.dtype));
  t.data.resize(static_cast<size_t>(n));
  // Row by row on every core: each row's values are the same whichever thread decodes it.
  const int64_t n_parts = std::max<int64_t>(1, rows / 256);
  parallel_each(static_cast<size_t>(n_parts), 64, [&](size_t part) {
    const int64_t begin = rows * static_cast<int64_t>(part) / n_parts;
    const int64_t end = rows * (static_cast<int64_t>(part) + 1) / n_parts;
    if (dtype_is_fp8(t.dtype)) {  // FP8 rows carry their scales: one row per call
      for (int64_t r = begin; r < end; ++r) {
        dequantize_row(t.dtype, t.raw.data() + r * row_bytes, t.data.data() + r * cols, cols);
      }
      return;
    }
    dequantize_row(t.dtype, t.raw.data() + begin * row_bytes, t.data.data() + begin * cols,
                   (end - begin) * cols);
  });
  t.raw.clear();
  t.raw.shrink_to_fit();
  t.dtype = DType::kF32;
}

}  // namespace detllm
