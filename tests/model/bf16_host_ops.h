// A host backend that asks for bf16 weights in "device" memory, as the CUDA backend does: the
// CPU kernels (which read bf16 weights in place) run on weights LlamaModel placed and converted
// itself, so the device-backend paths of the model (the upload conversion, fill_uniform's bf16
// rounding, LlamaModel::placed) are exercised on the CPU. Memory is host memory throughout.
#pragma once

#include <memory>

#include "conformance/delegating_ops.h"
#include "kernels/ops.h"

namespace detllm::test_ops {

class Bf16HostOps final : public conformance::DelegatingOps {
 public:
  explicit Bf16HostOps(std::unique_ptr<kernels::Ops> inner)
      : DelegatingOps(std::move(inner), "cpu-bf16-test") {}
  bool host_memory() const override { return false; }
  DType weight_dtype() const override { return DType::kBF16; }
};

}  // namespace detllm::test_ops
