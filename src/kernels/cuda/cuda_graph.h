// CUDA graphs behind kernels::GraphCapture (ops.h): stream capture of the ops CudaOps queues
// on its stream, instantiated once and replayed with cudaGraphLaunch. A graph remembers the
// backend scratch it was captured with; it is valid while that scratch has not moved (scratch
// only grows, so a later, larger eager step may retire graphs: the model captures them again).
// Used by LlamaModel for padded decode steps (model/step_padding.h, V8).
// Test: build-cuda/tests/test_cuda --gtest_filter='CudaGraph*'.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <vector>

#include "kernels/ops.h"

namespace detllm::kernels::cuda {

class CudaGraphCapture final : public GraphCapture {
 public:
  // scratch_bases: the base pointers of the backend's scratch buffers now.
  CudaGraphCapture(cudaStream_t stream, std::function<std::vector<const void*>()> scratch_bases);
  ~CudaGraphCapture() override;

  void begin_capture() override;
  std::unique_ptr<OpsGraph> end_capture() override;
  void abort_capture() override;
  void replay(const OpsGraph& graph) override;
  bool graph_valid(const OpsGraph& graph) const override;
  void* alloc_pinned(size_t n_bytes) override;
  void free_pinned(void* p) override;

  bool capturing() const { return capturing_; }

 private:
  cudaStream_t stream_;
  std::function<std::vector<const void*>()> scratch_bases_;
  bool capturing_ = false;
};

}  // namespace detllm::kernels::cuda
