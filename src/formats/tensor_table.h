// The tensor table of a weight file (GGUF, safetensors): the tensor infos in the file's order
// and a name index, and TableSource: the by-name accessors of TensorSource both readers give
// from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/mmap_file.h"
#include "formats/tensor_source.h"

namespace detllm {

template <typename Info>  // Info has .name and .shape
struct TensorTable {
  std::string path;  // the file, for error messages
  std::vector<Info> tensors;
  std::unordered_map<std::string, size_t> index;  // name -> position in tensors

  // Throws detllm::Error naming the tensor and the file when there is none of that name.
  const Info& tensor_at(const std::string& name) const {
    auto it = index.find(name);
    if (it == index.end()) throw_error("{}: no tensor named '{}'", path, name);
    return tensors[it->second];
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(tensors.size());
    for (const Info& t : tensors) out.push_back(t.name);
    return out;
  }
  bool contains(const std::string& name) const { return index.contains(name); }
};

// A reader's state over its file's bytes, mapped from `path` (from_file) or given (from_bytes:
// tests and fuzz targets; the bytes must outlive it; `name` stands for the file in errors),
// then parsed. Impl derives from TensorTable and has map, data, size and parse().
template <class Impl>
std::unique_ptr<Impl> from_file(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->map = MappedFile::open(path);
  impl->data = impl->map.data();
  impl->size = impl->map.size();
  impl->parse();
  return impl;
}
template <class Impl>
std::unique_ptr<Impl> from_bytes(const uint8_t* data, size_t size, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->path = std::move(name);
  impl->data = data;
  impl->size = size;
  impl->parse();
  return impl;
}

// A TensorSource whose tensors sit in a TensorTable (the reader gives it by table()).
template <typename Info>
class TableSource : public TensorSource {
 public:
  const std::string& path() const final { return table().path; }
  std::vector<std::string> tensor_names() const final { return table().names(); }
  bool has_tensor(const std::string& name) const final { return table().contains(name); }
  std::vector<int64_t> tensor_shape(const std::string& name) const final {
    return tensor_info(name).shape;
  }
  // Throws detllm::Error naming the tensor and the file when missing.
  const Info& tensor_info(const std::string& name) const { return table().tensor_at(name); }

 protected:
  virtual const TensorTable<Info>& table() const = 0;
};

}  // namespace detllm
