// Host-memory defaults of the Ops memory functions, synthetic-weight fill, the generic gather
// and the fused ops as the op sequences they stand for (CPU backends use them as they are; the
// CUDA backend overrides them). Test: build/tests/test_kernels --gtest_filter='FusedOps*'.
#include "kernels/ops.h"

#include <algorithm>
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

void Ops::copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                    size_t row_bytes, int64_t rows) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  for (int64_t r = 0; r < rows; ++r) copy(d + r * dst_pitch, s + r * src_pitch, row_bytes);
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

namespace {

// The fused defaults copy rows with memcpy (host-addressable memory) and pass GEMM inputs as
// fp32; a backend with device memory or another GEMM input dtype must override them.
void check_host_fp32(const Ops& ops, const char* op) {
  check(ops.gemm_input_dtype() == DType::kF32,
        "backend {} must implement {} (the default runs on host memory with fp32 GEMM inputs)",
        ops.name(), op);
}

// Copies `cols` floats of each of n rows from src (row stride ld_src) to dst (row stride ld_dst).
void copy_columns(const float* src, int64_t ld_src, int64_t n, int64_t cols, float* dst,
                  int64_t ld_dst) {
  for (int64_t r = 0; r < n; ++r)
    std::memcpy(dst + r * ld_dst, src + r * ld_src, sizeof(float) * static_cast<size_t>(cols));
}

}  // namespace

void Ops::matmul_rounded(const void* x, int32_t m, const WeightMatrix& w, const float* bias,
                         float* y, int64_t ldy, NumericsMode numerics) {
  check_host_fp32(*this, "matmul_rounded");
  check(ldy >= w.rows, "matmul_rounded: row stride {} below the {} output features", ldy, w.rows);
  const auto* xf = static_cast<const float*>(x);
  if (ldy == w.rows) return matmul(xf, m, w, bias, y, numerics);
  fused_scratch_.resize(static_cast<size_t>(m) * static_cast<size_t>(w.rows));
  matmul(xf, m, w, bias, fused_scratch_.data(), numerics);
  copy_columns(fused_scratch_.data(), w.rows, m, w.rows, y, ldy);
}

void Ops::add_rmsnorm(float* x, const float* y, const float* w, int32_t n, int32_t dim, float eps,
                      void* out) {
  check_host_fp32(*this, "add_rmsnorm");
  if (y != nullptr) add(x, y, int64_t{n} * dim);
  rmsnorm(x, w, n, dim, eps, static_cast<float*>(out));
}

void Ops::qkv_rope_append(const float* qkv, int32_t n, int32_t n_heads, const float* q_norm,
                          const float* k_norm, float eps, const RopeTable& table,
                          const StepBatch& batch, const KvCacheLayer& cache, float* q_out) {
  check_host_fp32(*this, "qkv_rope_append");
  check((q_norm == nullptr) == (k_norm == nullptr),
        "qkv_rope_append: q_norm and k_norm are given together or not at all");
  const int64_t hd = cache.head_dim;
  const int64_t q_dim = n_heads * hd, kv_dim = cache.n_kv_heads * hd;
  const int64_t ld = q_dim + 2 * kv_dim;
  fused_scratch_.resize(static_cast<size_t>(2 * n * kv_dim));
  float* k = fused_scratch_.data();
  float* v = k + n * kv_dim;
  copy_columns(qkv, ld, n, q_dim, q_out, q_dim);
  copy_columns(qkv + q_dim, ld, n, kv_dim, k, kv_dim);
  copy_columns(qkv + q_dim + kv_dim, ld, n, kv_dim, v, kv_dim);
  if (q_norm != nullptr) {
    rmsnorm(q_out, q_norm, n * n_heads, cache.head_dim, eps, q_out);
    rmsnorm(k, k_norm, n * cache.n_kv_heads, cache.head_dim, eps, k);
  }
  rope(q_out, n, n_heads, cache.head_dim, batch.positions, table);
  rope(k, n, cache.n_kv_heads, cache.head_dim, batch.positions, table);
  kv_append(k, v, batch, cache);
}

void Ops::attention_rounded(const float* q, const KvCacheLayer& cache, const StepBatch& batch,
                            int32_t n_heads, float scale, void* out) {
  check_host_fp32(*this, "attention_rounded");
  attention(q, cache, batch, n_heads, scale, static_cast<float*>(out));
}

void Ops::silu_mul_rows(const float* gate_up, int32_t n, int32_t ffn, void* out) {
  check_host_fp32(*this, "silu_mul_rows");
  const int64_t cells = int64_t{n} * ffn;
  fused_scratch_.resize(static_cast<size_t>(2 * cells));
  float* gate = fused_scratch_.data();
  float* up = gate + cells;
  copy_columns(gate_up, 2 * ffn, n, ffn, gate, ffn);
  copy_columns(gate_up + ffn, 2 * ffn, n, ffn, up, ffn);
  silu_mul(gate, up, cells, static_cast<float*>(out));
}

}  // namespace detllm::kernels
