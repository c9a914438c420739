// Host-memory defaults of the Ops memory functions and the generic gather (CPU backends use
// them as they are; the CUDA backend overrides them).
#include "kernels/ops.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace detllm::kernels {

void* Ops::alloc_bytes(size_t n_bytes) {
  if (n_bytes == 0) return nullptr;
  const size_t rounded = (n_bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}

void Ops::free_bytes(void* p) { std::free(p); }

void Ops::upload(void* dst, const void* src_host, size_t n_bytes) {
  if (n_bytes) std::memcpy(dst, src_host, n_bytes);
}

void Ops::download(void* dst_host, const void* src, size_t n_bytes) {
  if (n_bytes) std::memcpy(dst_host, src, n_bytes);
}

void Ops::copy(void* dst, const void* src, size_t n_bytes) {
  if (n_bytes) std::memmove(dst, src, n_bytes);
}

void Ops::gather_rows(const float* x, int32_t dim, const int32_t* rows, int32_t n_rows,
                      float* out) {
  for (int32_t r = 0; r < n_rows; ++r) {
    std::memcpy(out + static_cast<size_t>(r) * dim, x + static_cast<size_t>(rows[r]) * dim,
                sizeof(float) * dim);
  }
}

}  // namespace detllm::kernels
