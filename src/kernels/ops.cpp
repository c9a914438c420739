// Host-memory defaults of the Ops memory functions, synthetic-weight fill and the generic
// gather (CPU backends use them as they are; the CUDA backend overrides them).
#include "kernels/ops.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"
#include "kernels/synthetic_values.h"

namespace detllm::kernels {

float* KvCacheLayer::k_f32() const {
  check(dtype == DType::kF32, "KV cache is {}, this kernel reads fp32 KV only", dtype_name(dtype));
  return static_cast<float*>(k);
}
float* KvCacheLayer::v_f32() const {
  check(dtype == DType::kF32, "KV cache is {}, this kernel reads fp32 KV only", dtype_name(dtype));
  return static_cast<float*>(v);
}

void* Ops::alloc_bytes(size_t n_bytes) {
  if (n_bytes == 0) return nullptr;
  const size_t rounded = (n_bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}

void Ops::free_bytes(void* p) {
  std::free(p);
}

void Ops::upload(void* dst, const void* src_host, size_t n_bytes) {
  if (n_bytes) std::memcpy(dst, src_host, n_bytes);
}

void Ops::download(void* dst_host, const void* src, size_t n_bytes) {
  if (n_bytes) std::memcpy(dst_host, src, n_bytes);
}

void Ops::copy(void* dst, const void* src, size_t n_bytes) {
  if (n_bytes) std::memmove(dst, src, n_bytes);
}

void Ops::fill_uniform(void* dst, DType dtype, int64_t n, uint64_t key, float center, float scale) {
  check(dtype == DType::kF32 || dtype == DType::kBF16,
        "fill_uniform: dtype {} unsupported (f32 or bf16)", dtype_name(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const float v = synthetic_value(key, static_cast<uint64_t>(i), center, scale);
    if (dtype == DType::kF32) {
      static_cast<float*>(dst)[i] = v;
    } else {
      static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v);
    }
  }
}

void Ops::gather_rows(const float* x, int32_t dim, const int32_t* rows, int32_t n_rows,
                      float* out) {
  for (int32_t r = 0; r < n_rows; ++r) {
    std::memcpy(out + static_cast<size_t>(r) * dim, x + static_cast<size_t>(rows[r]) * dim,
                sizeof(float) * dim);
  }
}

}  // namespace detllm::kernels
