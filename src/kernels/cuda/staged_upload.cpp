// StagedUpload (staged_upload.h): two pinned chunks, a parallel memcpy into one while the other
// is in flight.
#include "kernels/cuda/staged_upload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"

namespace detllm::kernels::cuda {
namespace {

void cu(cudaError_t e, const char* what) {
  check(e == cudaSuccess, "CUDA error in weight upload ({}): {}", what, cudaGetErrorString(e));
}

// dst ← src in parts of >= 4 MB on up to 8 threads (one memcpy is bound by one core).
void parallel_copy(void* dst, const void* src, size_t n) {
  const size_t n_parts = std::clamp<size_t>(n >> 22, 1, 8);
  parallel_each(n_parts, n_parts, [&](size_t p) {
    const size_t begin = n * p / n_parts, end = n * (p + 1) / n_parts;
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin,
                end - begin);
  });
}

}  // namespace

void StagedUpload::upload(void* dst, const void* src, size_t n_bytes, cudaStream_t stream) {
  if (n_bytes == 0) return;
  if (n_bytes < kMinBytes) {
    cu(cudaMemcpyAsync(dst, src, n_bytes, cudaMemcpyHostToDevice, stream), "small copy");
    return;
  }
  if (chunk_[0] == nullptr) {
    for (int i = 0; i < 2; ++i) {
      cu(cudaHostAlloc(&chunk_[i], kChunkBytes, cudaHostAllocDefault), "pinned staging");
      cu(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming), "staging event");
      cu(cudaEventRecord(done_[i], stream), "staging event");
    }
  }
  for (size_t off = 0, c = 0; off < n_bytes; off += kChunkBytes, ++c) {
    const size_t len = std::min(kChunkBytes, n_bytes - off);
    const int b = static_cast<int>(c % 2);
    cu(cudaEventSynchronize(done_[b]), "staging wait");  // its previous copy has landed
    parallel_copy(chunk_[b], static_cast<const char*>(src) + off, len);
    cu(cudaMemcpyAsync(static_cast<char*>(dst) + off, chunk_[b], len, cudaMemcpyHostToDevice,
                       stream),
       "staged copy");
    cu(cudaEventRecord(done_[b], stream), "staging event");
  }
}

void StagedUpload::release() {
  for (int i = 0; i < 2; ++i) {
    if (done_[i] != nullptr) {
      cudaEventSynchronize(done_[i]);  // no throw here: called from destructors
      cudaEventDestroy(done_[i]);
      done_[i] = nullptr;
    }
    if (chunk_[i] != nullptr) {
      cudaFreeHost(chunk_[i]);
      chunk_[i] = nullptr;
    }
  }
}

}  // namespace detllm::kernels::cuda
