// The tensor table of a weight file (GGUF, safetensors): the tensor infos in the file's order
// and a name index, with the by-name accessors both readers give through TensorSource.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace detllm {

template <typename Info>  // Info has .name and .shape
struct TensorTable {
  std::vector<Info> tensors;
  std::unordered_map<std::string, size_t> index;  // name -> position in tensors

  // Throws detllm::Error naming the tensor and `path` when there is none of that name.
  const Info& tensor_at(const std::string& path, const std::string& name) const {
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

}  // namespace detllm
