// Hugging Face safetensors reader: one file (SafetensorsFile) or a model directory, single or
// sharded through model.safetensors.index.json (SafetensorsDir). Files are memory-mapped; the
// JSON header is validated completely (dtypes, shapes, data offsets contiguous and inside the
// file) before any tensor is touched. F32/F16/BF16 load as fp32 (exact widening).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "formats/tensor_table.h"

namespace detllm {

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;           // as written in the header: "BF16", "F32", "I64", ...
  std::vector<int64_t> shape;  // PyTorch order, as in the header (may be empty: a scalar)
  uint64_t offset = 0;         // absolute byte offset in the file (validated)
  uint64_t n_bytes = 0;        // product(shape) * dtype size (validated)
};

// A tensor's bytes as stored, for consumers that keep bf16/f16 weights without widening.
struct RawTensorView {
  DType dtype;
  std::vector<int64_t> shape;  // PyTorch order
  const uint8_t* data;         // n_bytes, little-endian, no alignment guaranteed
  uint64_t n_bytes;
};

// One .safetensors file.
//   [ header_len:u64 LE | JSON header (header_len bytes) | byte buffer ]
// header: {"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets": [b, e]}}
// with offsets relative to the byte buffer, which the tensors must cover without gaps.
class SafetensorsFile final : public TableSource<SafetensorsTensorInfo> {
 public:
  // Maps and validates `path`. Throws detllm::Error naming the problem and the file.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  // Parses from memory (tests, fuzz target); `data` must outlive the object.
  static std::unique_ptr<SafetensorsFile> parse(const uint8_t* data, size_t size, std::string name);
  ~SafetensorsFile() override;

  const std::map<std::string, std::string>& metadata() const;      // "__metadata__"
  const std::vector<SafetensorsTensorInfo>& tensor_infos() const;  // in data-offset order
  // Throws for dtypes other than F32/F16/BF16.
  RawTensorView raw_view(const std::string& name) const;

  // TensorSource
  HostTensor load_f32(const std::string& name) const override;

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  const TensorTable<SafetensorsTensorInfo>& table() const override;
  std::unique_ptr<Impl> impl_;
};

// A Hugging Face model's weights. `path` may be
//   - a directory holding model.safetensors.index.json (weight_map: tensor -> shard file) or
//     model.safetensors (the index wins when both exist);
//   - a model.safetensors.index.json file, or a single .safetensors file.
// Every shard is opened and validated; a tensor in two shards, or a weight_map entry missing
// from its shard, is an error.
class SafetensorsDir final : public TensorSource {
 public:
  static std::unique_ptr<SafetensorsDir> open(const std::string& path);
  ~SafetensorsDir() override;

  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  RawTensorView raw_view(const std::string& name) const;
  std::string dtype(const std::string& name) const;  // as written in the header

  // TensorSource
  const std::string& path() const override { return path_; }
  std::vector<std::string> tensor_names() const override;
  bool has_tensor(const std::string& name) const override;
  std::vector<int64_t> tensor_shape(const std::string& name) const override;
  HostTensor load_f32(const std::string& name) const override;

 private:
  SafetensorsDir() = default;
  const SafetensorsFile& shard_of(const std::string& name) const;

  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<std::string> names_;                       // shard order, then offset order
  std::unordered_map<std::string, size_t> shard_index_;  // tensor name -> index in shards_
};

}  // namespace detllm
