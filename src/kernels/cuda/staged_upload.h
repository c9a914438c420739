// Host → device copies of large buffers (model weights) through two pinned staging chunks: a
// chunk is copied into pinned memory on several threads while the previous one is in flight,
// so a pageable source moves at DMA speed instead of the driver's single-threaded bounce
// (an 8B model's 16 GB of bf16 weights). Bytes are copied, never changed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace detllm::kernels::cuda {

class StagedUpload {
 public:
  // Sources smaller than this go straight to cudaMemcpyAsync.
  static constexpr size_t kMinBytes = size_t{8} << 20;
  static constexpr size_t kChunkBytes = size_t{64} << 20;

  StagedUpload() = default;
  StagedUpload(const StagedUpload&) = delete;
  StagedUpload& operator=(const StagedUpload&) = delete;
  ~StagedUpload() { release(); }

  // Queues dst (device) ← src (host, pageable or not) on `stream`. Returns once src may be
  // reused: every byte has been copied into staging or handed to the copy engine.
  void upload(void* dst, const void* src, size_t n_bytes, cudaStream_t stream);
  // Waits for in-flight chunks and frees the pinned memory (before the stream is destroyed).
  void release();

 private:
  void* chunk_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
};

}  // namespace detllm::kernels::cuda
