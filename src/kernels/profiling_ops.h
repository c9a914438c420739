// ProfilingOps: a backend that forwards every op to another one and times each compute op on
// the host clock, with inner.synchronize() before and after, so a device backend's time lands
// on the op that queued it. Keyed by op and shape ("matmul 4096x14336 m=64", "attention"), in
// the order first seen. For finding where a step's time goes (benchmarks/cuda_step_profile_bench):
// it serializes the device and adds a sync per op, so only per-op times and their ratios
// between two runs mean anything, not the step total. Steps run eagerly (no graph_capture).
// Bits are the inner backend's (tests/kernels/profiling_ops_test.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace detllm::kernels {

struct OpTime {
  std::string key;  // op name and shape
  int64_t calls = 0;
  double total_ms = 0.0;
};

class ProfilingOps final : public Ops {
 public:
  explicit ProfilingOps(Ops& inner) : inner_(inner) {}

  const std::vector<OpTime>& times() const { return times_; }
  void reset() { times_.clear(); }

  std::string_view name() const override { return inner_.name(); }
  bool host_memory() const override { return inner_.host_memory(); }
  DType weight_dtype() const override { return inner_.weight_dtype(); }
  bool reads_weight_dtype(DType t) const override { return inner_.reads_weight_dtype(t); }
  DType kv_dtype() const override { return inner_.kv_dtype(); }
  bool kv_fp8() const override { return inner_.kv_fp8(); }
  size_t device_memory_free() const override { return inner_.device_memory_free(); }
  void* alloc_bytes(size_t n) override { return inner_.alloc_bytes(n); }
  void free_bytes(void* p) override { inner_.free_bytes(p); }
  void upload(void* dst, const void* src, size_t n) override { inner_.upload(dst, src, n); }
  void download(void* dst, const void* src, size_t n) override { inner_.download(dst, src, n); }
  void copy(void* dst, const void* src, size_t n) override { inner_.copy(dst, src, n); }
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                 size_t row_bytes, int64_t rows) override {
    inner_.copy_rows(dst, dst_pitch, src, src_pitch, row_bytes, rows);
  }
  void synchronize() override { inner_.synchronize(); }
  void bind_thread() override { inner_.bind_thread(); }
  void fill_uniform(void* dst, DType dtype, int64_t n, uint64_t key, float center,
                    float scale) override {
    inner_.fill_uniform(dst, dtype, n, key, center, scale);
  }

  void embedding(const WeightMatrix& table, const int32_t* ids, int32_t n, float* out) override;
  void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
               float* out) override;
  void matmul(const float* x, int32_t m, const WeightMatrix& w, const float* bias, float* y,
              NumericsMode numerics) override;
  void rope(float* x, int32_t n, int32_t n_heads, int32_t head_dim, const int32_t* positions,
            const RopeTable& table) override;
  void kv_append(const float* k, const float* v, const StepBatch& batch,
                 const KvCacheLayer& cache) override;
  void attention(const float* q, const KvCacheLayer& cache, const StepBatch& batch, int32_t n_heads,
                 float scale, float* out) override;
  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override;
  void add(float* x, const float* y, int64_t n) override;
  void gather_rows(const float* x, int32_t dim, const int32_t* rows, int32_t n_rows,
                   float* out) override;
  void sample_rows(const float* logits, int32_t rows, int32_t vocab, const SampleRowParams* params,
                   SampleRowResult* out) override;
  void sample_rows_masked(const float* logits, int32_t rows, int32_t vocab,
                          const SampleRowParams* params, RowMasks masks,
                          SampleRowResult* out) override;
  void apply_logit_penalties(float* logits, int32_t rows, int32_t vocab,
                             const LogitPenalty* entries, int32_t n) override;
  DType gemm_input_dtype() const override;
  void matmul_rounded(const void* x, int32_t m, const WeightMatrix& w, const float* bias, float* y,
                      int64_t ldy, NumericsMode numerics) override;
  void announce_gemm_input(const void* out, const WeightMatrix& reader) override;
  void add_rmsnorm(float* x, const float* y, const float* w, int32_t n, int32_t dim, float eps,
                   void* out) override;
  void qkv_rope_append(const float* qkv, int32_t n, int32_t n_heads, const float* q_norm,
                       const float* k_norm, float eps, const RopeTable& table,
                       const StepBatch& batch, const KvCacheLayer& cache, float* q_out) override;
  void attention_rounded(const float* q, const KvCacheLayer& cache, const StepBatch& batch,
                         int32_t n_heads, float scale, void* out) override;
  void silu_mul_rows(const float* gate_up, int32_t n, int32_t ffn, void* out) override;
  void moe_route(const float* logits, int32_t n, int32_t n_experts, int32_t k, bool renormalize,
                 int32_t* experts, float* weights) override;
  void gather_rows_rounded(const void* x, int32_t dim, const int32_t* rows, int32_t n_rows,
                           void* out) override;
  void matmul_grouped(const void* x, const int32_t* offsets, int32_t n_groups,
                      const WeightMatrix* w, float* y, int64_t ldy,
                      NumericsMode numerics) override;
  void moe_combine(const float* y, const int32_t* rows, const float* weights, int32_t n,
                   int32_t k, int32_t dim, const float* shared, const float* shared_gate,
                   float* out) override;
  void moe_group(const int32_t* experts, int32_t n, int32_t k, int32_t n_experts,
                 int32_t* offsets, int32_t* src_row, int32_t* rows) override;
  void matmul_grouped_device(const void* x, const int32_t* offsets, int32_t n_groups,
                             int32_t rows_bound, const WeightMatrix* w, float* y, int64_t ldy,
                             NumericsMode numerics) override;

  NumericsMode gemm_numerics(NumericsMode requested) const override {
    return inner_.gemm_numerics(requested);
  }
  void prepare_matmul(const WeightMatrix& w, int32_t max_m) override {
    inner_.prepare_matmul(w, max_m);
  }
  GraphCapture* graph_capture() override { return nullptr; }  // eager: every op is seen

 private:
  // Runs f between two synchronizations and adds its time to `key`.
  template <typename F>
  void timed(const std::string& key, F&& f) {
    inner_.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    inner_.synchronize();
    add_time(
        key,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  void add_time(const std::string& key, double ms);

  Ops& inner_;
  std::vector<OpTime> times_;
};

}  // namespace detllm::kernels
