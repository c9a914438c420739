// A file-backed source of named weight tensors (a GGUF file or a Hugging Face safetensors
// directory). Names are the file's own (GGUF "blk.0.attn_q.weight", HF
// "model.layers.0.self_attn.q_proj.weight"); model/llama_weights maps them to the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace detllm {

// Host tensor in fp32, row-major; shape in PyTorch order (outermost first), e.g. a linear
// weight is (out_features, in_features).
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;  // product(shape) elements

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
};

}  // namespace detllm
