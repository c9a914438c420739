// A test backend that forwards every op of kernels::Ops — memory functions, fused ops, graphs
// and all — to another backend (a CUDA ops object), so that a negative control can replace one
// op of the GPU backend and run the rest unchanged. conformance::DelegatingOps does this for
// host-memory backends only (it keeps the host memory defaults).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "kernels/ops.h"
#include "kernels/sampling/sample_row.h"  // RowMasks, passed by value

namespace detllm::kernels::cuda_testing {

class ForwardingOps : public Ops {
 public:
  ForwardingOps(std::unique_ptr<Ops> inner, std::string name)
      : inner_(std::move(inner)), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  bool host_memory() const override { return inner_->host_memory(); }
  DType weight_dtype() const override { return inner_->weight_dtype(); }
  bool reads_weight_dtype(DType t) const override { return inner_->reads_weight_dtype(t); }
  DType kv_dtype() const override { return inner_->kv_dtype(); }
  bool kv_fp8() const override { return inner_->kv_fp8(); }
  size_t device_memory_free() const override { return inner_->device_memory_free(); }
  void* alloc_bytes(size_t n) override { return inner_->alloc_bytes(n); }
  void free_bytes(void* p) override { inner_->free_bytes(p); }
  void upload(void* d, const void* s, size_t n) override { inner_->upload(d, s, n); }
  void download(void* d, const void* s, size_t n) override { inner_->download(d, s, n); }
  void copy(void* d, const void* s, size_t n) override { inner_->copy(d, s, n); }
  void copy_rows(void* d, size_t dp, const void* s, size_t sp, size_t rb, int64_t rows) override {
    inner_->copy_rows(d, dp, s, sp, rb, rows);
  }
  void synchronize() override { inner_->synchronize(); }
  void bind_thread() override { inner_->bind_thread(); }
  void fill_uniform(void* d, DType t, int64_t n, uint64_t key, float c, float s) override {
    inner_->fill_uniform(d, t, n, key, c, s);
  }
  void embedding(const WeightMatrix& t, const int32_t* ids, int32_t n, float* out) override {
    inner_->embedding(t, ids, n, out);
  }
  void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
               float* out) override {
    inner_->rmsnorm(x, w, n, dim, eps, out);
  }
  void matmul(const float* x, int32_t m, const WeightMatrix& w, const float* bias, float* y,
              NumericsMode numerics) override {
    inner_->matmul(x, m, w, bias, y, numerics);
  }
  void rope(float* x, int32_t n, int32_t h, int32_t d, const int32_t* pos,
            const RopeTable& t) override {
    inner_->rope(x, n, h, d, pos, t);
  }
  void kv_append(const float* k, const float* v, const StepBatch& b,
                 const KvCacheLayer& c) override {
    inner_->kv_append(k, v, b, c);
  }
  void attention(const float* q, const KvCacheLayer& c, const StepBatch& b, int32_t h, float s,
                 float* out) override {
    inner_->attention(q, c, b, h, s, out);
  }
  void silu_mul(const float* g, const float* u, int64_t n, float* out) override {
    inner_->silu_mul(g, u, n, out);
  }
  void add(float* x, const float* y, int64_t n) override { inner_->add(x, y, n); }
  void gather_rows(const float* x, int32_t dim, const int32_t* rows, int32_t n,
                   float* out) override {
    inner_->gather_rows(x, dim, rows, n, out);
  }
  DType gemm_input_dtype() const override { return inner_->gemm_input_dtype(); }
  void matmul_rounded(const void* x, int32_t m, const WeightMatrix& w, const float* bias,
                      float* y, int64_t ldy, NumericsMode numerics) override {
    inner_->matmul_rounded(x, m, w, bias, y, ldy, numerics);
  }
  void announce_gemm_input(const void* out, const WeightMatrix& reader) override {
    inner_->announce_gemm_input(out, reader);
  }
  void add_rmsnorm(float* x, const float* y, const float* w, int32_t n, int32_t dim, float eps,
                   void* out) override {
    inner_->add_rmsnorm(x, y, w, n, dim, eps, out);
  }
  void qkv_rope_append(const float* qkv, int32_t n, int32_t n_heads, const float* q_norm,
                       const float* k_norm, float eps, const RopeTable& table,
                       const StepBatch& batch, const KvCacheLayer& cache, float* q_out) override {
    inner_->qkv_rope_append(qkv, n, n_heads, q_norm, k_norm, eps, table, batch, cache, q_out);
  }
  void attention_rounded(const float* q, const KvCacheLayer& c, const StepBatch& b, int32_t h,
                         float s, void* out) override {
    inner_->attention_rounded(q, c, b, h, s, out);
  }
  void silu_mul_rows(const float* gu, int32_t n, int32_t ffn, void* out) override {
    inner_->silu_mul_rows(gu, n, ffn, out);
  }
  void moe_route(const float* l, int32_t n, int32_t ne, int32_t k, bool r, int32_t* e,
                 float* w) override {
    inner_->moe_route(l, n, ne, k, r, e, w);
  }
  void gather_rows_rounded(const void* x, int32_t dim, const int32_t* rows, int32_t n,
                           void* out) override {
    inner_->gather_rows_rounded(x, dim, rows, n, out);
  }
  void matmul_grouped(const void* x, const int32_t* off, int32_t g, const WeightMatrix* w,
                      float* y, int64_t ldy, NumericsMode numerics) override {
    inner_->matmul_grouped(x, off, g, w, y, ldy, numerics);
  }
  void moe_group(const int32_t* e, int32_t n, int32_t k, int32_t ne, int32_t* off,
                 int32_t* src, int32_t* rows) override {
    inner_->moe_group(e, n, k, ne, off, src, rows);
  }
  void matmul_grouped_device(const void* x, const int32_t* off, int32_t g, int32_t bound,
                             const WeightMatrix* w, float* y, int64_t ldy,
                             NumericsMode numerics) override {
    inner_->matmul_grouped_device(x, off, g, bound, w, y, ldy, numerics);
  }
  void moe_combine(const float* y, const int32_t* rows, const float* w, int32_t n, int32_t k,
                   int32_t dim, const float* sh, const float* sg, float* out) override {
    inner_->moe_combine(y, rows, w, n, k, dim, sh, sg, out);
  }
  void sample_rows(const float* l, int32_t rows, int32_t vocab, const SampleRowParams* p,
                   SampleRowResult* out) override {
    inner_->sample_rows(l, rows, vocab, p, out);
  }
  void sample_rows_masked(const float* l, int32_t rows, int32_t vocab, const SampleRowParams* p,
                          RowMasks masks, SampleRowResult* out) override {
    inner_->sample_rows_masked(l, rows, vocab, p, masks, out);
  }
  void apply_logit_penalties(float* l, int32_t rows, int32_t vocab, const LogitPenalty* e,
                             int32_t n) override {
    inner_->apply_logit_penalties(l, rows, vocab, e, n);
  }
  NumericsMode gemm_numerics(NumericsMode r) const override { return inner_->gemm_numerics(r); }
  void prepare_matmul(const WeightMatrix& w, int32_t max_m) override {
    inner_->prepare_matmul(w, max_m);
  }
  GraphCapture* graph_capture() override { return inner_->graph_capture(); }

 protected:
  std::unique_ptr<Ops> inner_;
  std::string name_;
};

}  // namespace detllm::kernels::cuda_testing
