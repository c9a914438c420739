// GGUF v3 reader (v2 accepted: same layout): header, metadata key/values, tensor infos,
// alignment, and the tensors as stored (F16, BF16 and every GGUF block type detllm reads, kept
// as they are: load_stored) or dequantized to fp32 (load_f32).
// The file is memory-mapped and every offset, size, count, type and shape is validated before
// it is used: a truncated, corrupt or unsupported file throws detllm::Error naming the problem
// and the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "formats/dequant.h"  // GgmlType, GgmlTypeInfo
#include "formats/tensor_table.h"

namespace detllm {

// One metadata value. Integers of every width are widened to int64/uint64, floats to double.
struct GgufValue;
using GgufArray = std::vector<GgufValue>;
struct GgufValue {
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> v;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // PyTorch order (GGUF ne[] reversed)
  uint32_t type = 0;           // raw ggml type id: a known ggml type (see ggml_type_info);
                               // load_f32 throws if it is not one of GgmlType
  uint64_t offset = 0;         // absolute byte offset in the file (validated)
  uint64_t n_bytes = 0;        // size of the data (validated against the file size)
};

class GgufFile final : public TableSource<GgufTensorInfo> {
 public:
  // Opens, maps and validates the header, metadata and tensor infos. Throws detllm::Error.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Parses from memory (for tests and the fuzz target); `data` must outlive the object.
  // `name` stands for the file in error messages.
  static std::unique_ptr<GgufFile> parse(const uint8_t* data, size_t size, std::string name);
  ~GgufFile() override;

  uint32_t version() const;
  const std::map<std::string, GgufValue>& metadata() const;
  bool has_key(const std::string& key) const;
  // Typed getters: throw detllm::Error naming the key and the file when missing or of the
  // wrong type. Integer getters accept any integer width; get_float accepts f32/f64.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  const std::vector<GgufTensorInfo>& tensor_infos() const;  // in file order
  // The tensor's raw bytes inside the mapping (n_bytes long, no alignment guaranteed when
  // parsed from memory); for kernels that consume quantized blocks directly.
  const uint8_t* tensor_data(const std::string& name) const;
  uint64_t alignment() const;    // general.alignment, default 32
  uint64_t data_offset() const;  // absolute offset of the (aligned) tensor data section

  // TensorSource
  HostTensor load_f32(const std::string& name) const override;
  HostTensor load_stored(const std::string& name) const override;

 private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  const TensorTable<GgufTensorInfo>& table() const override;
  std::unique_ptr<Impl> impl_;
};

}  // namespace detllm
