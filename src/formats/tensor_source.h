// A file-backed source of named weight tensors (a GGUF file or a Hugging Face safetensors
// directory). Names are the file's own (GGUF "blk.0.attn_q.weight", HF
// "model.layers.0.self_attn.q_proj.weight"); model/llama_weights maps them to the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace detllm {

// Host tensor, row-major; shape in PyTorch order (outermost first), e.g. a linear weight is
// (out_features, in_features). In fp32 (dtype kF32: `data`), or kept in the file's stored
// type (f16, bf16 or a GGUF block type: `raw` holds dtype_row_bytes(dtype, cols) bytes per
// row, rows back to back; formats/dequant.h dequantize_tensor turns it into fp32).
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;  // product(shape) elements when dtype == kF32, else empty
  DType dtype = DType::kF32;
  std::vector<uint8_t> raw;  // the stored bytes when dtype != kF32, else empty

  bool empty() const { return data.empty() && raw.empty(); }
  // The elements' storage: data or raw.
  const void* ptr() const {
    return dtype == DType::kF32 ? static_cast<const void*>(data.data()) : raw.data();
  }
  size_t n_bytes() const { return dtype == DType::kF32 ? data.size() * sizeof(float) : raw.size(); }

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // Where the tensors come from (for error messages): a file or a directory.
  virtual const std::string& path() const = 0;
  virtual std::vector<std::string> tensor_names() const = 0;
  virtual bool has_tensor(const std::string& name) const = 0;
  // Shape in PyTorch order. Throws detllm::Error naming the tensor and file if missing.
  virtual std::vector<int64_t> tensor_shape(const std::string& name) const = 0;
  // Dequantizes/widens to fp32 (exact for f32/f16/bf16; per the format's dequantization rule
  // for quantized blocks). Throws detllm::Error naming the tensor and file on any problem.
  virtual HostTensor load_f32(const std::string& name) const = 0;
  // The tensor in the type it is stored as when the kernels can use that type directly
  // (GGUF: f16, bf16 and the block types of core/dtype.h), else fp32 as load_f32. The default
  // (safetensors) is load_f32.
  virtual HostTensor load_stored(const std::string& name) const { return load_f32(name); }
};

}  // namespace detllm
