// A GGUF v3 file built in memory for the model tests: metadata in the given order, tensors
// (any, or none) aligned to 32 bytes. Used by the GGUF config tests (metadata only) and the GGUF
// mixture-of-experts tests (gguf_moe_export.h).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "formats/dequant.h"

namespace detllm::testing {

using GgufMetaValue = std::variant<std::string, uint32_t, uint64_t, float, bool>;

struct GgufOutTensor {
  std::string name;
  std::vector<int64_t> shape;  // PyTorch order (outermost first)
  uint32_t ggml_type = 0;
  std::vector<uint8_t> bytes;
};

// The GGML type id of a DType (F32 0, F16 1, Q4_0 2, Q4_1 3, Q8_0 8, BF16 30, ...).
inline uint32_t ggml_id(DType d) {
  for (uint32_t id = 0; id < 64; ++id) {
    if (const auto t = ggml_dtype(id); t && *t == d) return id;
  }
  throw std::invalid_argument("no ggml type for " + std::string(dtype_name(d)));
}

// A GGUF v3 file: metadata in the given order, tensors aligned to 32 bytes.
inline std::vector<uint8_t> gguf_file_bytes(
    const std::vector<std::pair<std::string, GgufMetaValue>>& meta,
    const std::vector<GgufOutTensor>& tensors) {
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
  auto put = [&](auto v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(v));
  };
  auto str = [&](const std::string& s) {
    put(uint64_t{s.size()});
    b.insert(b.end(), s.begin(), s.end());
  };
  put(uint32_t{3});
  put(uint64_t{tensors.size()});
  put(uint64_t{meta.size()});
  for (const auto& [key, value] : meta) {
    str(key);
    if (const auto* s = std::get_if<std::string>(&value)) {
      put(uint32_t{8});
      str(*s);
    } else if (const auto* u = std::get_if<uint32_t>(&value)) {
      put(uint32_t{4});
      put(*u);
    } else if (const auto* u64 = std::get_if<uint64_t>(&value)) {
      put(uint32_t{10});
      put(*u64);
    } else if (const auto* f = std::get_if<float>(&value)) {
      put(uint32_t{6});
      put(*f);
    } else {
      put(uint32_t{7});
      put(static_cast<uint8_t>(std::get<bool>(value)));
    }
  }
  uint64_t offset = 0;
  for (const GgufOutTensor& t : tensors) {
    str(t.name);
    put(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put(static_cast<uint64_t>(*it));
    put(t.ggml_type);
    put(offset);
    offset += (t.bytes.size() + 31) / 32 * 32;
  }
  while (b.size() % 32 != 0) b.push_back(0);
  for (const GgufOutTensor& t : tensors) {
    b.insert(b.end(), t.bytes.begin(), t.bytes.end());
    while (b.size() % 32 != 0) b.push_back(0);
  }
  return b;
}

}  // namespace detllm::testing
