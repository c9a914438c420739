// GGML tensor types (ids, block sizes, byte sizes) and their dequantization to fp32, exactly
// as ggml defines them: the result is bit-identical to the `gguf` Python package's reference
// dequantizer (tests/formats/dequant_test.cpp checks every supported type against it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "formats/tensor_source.h"

namespace detllm {

// GGML tensor types the loader dequantizes (numbering from the GGUF spec).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
};

// Layout of one GGML type: `block_size` elements are stored in `type_size` bytes. Every type
// ggml knows is listed (so sizes of tensors we cannot dequantize can still be validated).
struct GgmlTypeInfo {
  uint32_t id;
  std::string_view name;  // "Q4_K", as ggml and the gguf package spell it
  int64_t block_size;     // elements per block
  int64_t type_size;      // bytes per block
  bool can_dequantize;    // true for the GgmlType values above
};

// nullptr when `id` is not a ggml type.
const GgmlTypeInfo* ggml_type_info(uint32_t id);
// "Q4_K", or "unknown type 123".
std::string ggml_type_name(uint32_t id);

// Dequantizes `n` elements (a multiple of the type's block size) from `src`, which holds
// n / block_size * type_size bytes (no alignment required), into dst[0..n).
// Throws detllm::Error when the type cannot be dequantized (the caller adds tensor and file).
void dequantize_ggml(uint32_t type, const uint8_t* src, float* dst, int64_t n);

// The DType a GGML type is kept as in memory (HostTensor::dtype); nullopt for the types
// detllm cannot load.
std::optional<DType> ggml_dtype(uint32_t type);

// Turns a tensor kept in its stored type (HostTensor::dtype != kF32) into fp32 in place,
// with the same bits as loading it with load_f32; a no-op for fp32 tensors.
void dequantize_tensor(HostTensor& t);

// Widens `n` elements of f32/f16/bf16 from `src` (little-endian, no alignment required).
// Exact: no rounding happens.
void widen_to_f32(DType dtype, const uint8_t* src, float* dst, int64_t n);

}  // namespace detllm
