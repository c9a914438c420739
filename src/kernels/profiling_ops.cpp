// ProfilingOps (profiling_ops.h): forward, time, accumulate per op and shape.
#include "kernels/profiling_ops.h"

#include <fmt/format.h>

#include "kernels/sampling/sample_row.h"

namespace detllm::kernels {

void ProfilingOps::add_time(const std::string& key, double ms) {
  for (OpTime& t : times_) {
    if (t.key == key) {
      ++t.calls;
      t.total_ms += ms;
      return;
    }
  }
  times_.push_back({key, 1, ms});
}

void ProfilingOps::embedding(const WeightMatrix& table, const int32_t* ids, int32_t n, float* out) {
  timed("embedding", [&] { inner_.embedding(table, ids, n, out); });
}

void ProfilingOps::rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
                           float* out) {
  timed("rmsnorm", [&] { inner_.rmsnorm(x, w, n, dim, eps, out); });
}

void ProfilingOps::matmul(const float* x, int32_t m, const WeightMatrix& w, const float* bias,
                          float* y, NumericsMode numerics) {
  // The shape as the GEMM tables of docs/cuda.md write it: K→N, and the row count.
  timed(fmt::format("matmul {}->{} m={}", w.cols, w.rows, m),
        [&] { inner_.matmul(x, m, w, bias, y, numerics); });
}

void ProfilingOps::rope(float* x, int32_t n, int32_t n_heads, int32_t head_dim,
                        const int32_t* positions, const RopeTable& table) {
  timed("rope", [&] { inner_.rope(x, n, n_heads, head_dim, positions, table); });
}

void ProfilingOps::kv_append(const float* k, const float* v, const StepBatch& batch,
                             const KvCacheLayer& cache) {
  timed("kv_append", [&] { inner_.kv_append(k, v, batch, cache); });
}

void ProfilingOps::attention(const float* q, const KvCacheLayer& cache, const StepBatch& batch,
                             int32_t n_heads, float scale, float* out) {
  timed("attention", [&] { inner_.attention(q, cache, batch, n_heads, scale, out); });
}

void ProfilingOps::silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  timed("silu_mul", [&] { inner_.silu_mul(gate, up, n, out); });
}

void ProfilingOps::add(float* x, const float* y, int64_t n) {
  timed("add", [&] { inner_.add(x, y, n); });
}

void ProfilingOps::gather_rows(const float* x, int32_t dim, const int32_t* rows, int32_t n_rows,
                               float* out) {
  timed("gather_rows", [&] { inner_.gather_rows(x, dim, rows, n_rows, out); });
}

DType ProfilingOps::gemm_input_dtype() const {
  return inner_.gemm_input_dtype();
}

void ProfilingOps::matmul_rounded(const void* x, int32_t m, const WeightMatrix& w,
                                  const float* bias, float* y, int64_t ldy,
                                  NumericsMode numerics) {
  timed(fmt::format("matmul {}->{} m={}", w.cols, w.rows, m),
        [&] { inner_.matmul_rounded(x, m, w, bias, y, ldy, numerics); });
}

void ProfilingOps::announce_gemm_input(const void* out, const WeightMatrix& reader) {
  inner_.announce_gemm_input(out, reader);  // no kernel: not timed
}

void ProfilingOps::add_rmsnorm(float* x, const float* y, const float* w, int32_t n, int32_t dim,
                               float eps, void* out) {
  timed(y ? "add_rmsnorm" : "rmsnorm (fused)",
        [&] { inner_.add_rmsnorm(x, y, w, n, dim, eps, out); });
}

void ProfilingOps::qkv_rope_append(const float* qkv, int32_t n, int32_t n_heads,
                                   const float* q_norm, const float* k_norm, float eps,
                                   const RopeTable& table, const StepBatch& batch,
                                   const KvCacheLayer& cache, float* q_out) {
  timed("qkv_rope_append", [&] {
    inner_.qkv_rope_append(qkv, n, n_heads, q_norm, k_norm, eps, table, batch, cache, q_out);
  });
}

void ProfilingOps::attention_rounded(const float* q, const KvCacheLayer& cache,
                                     const StepBatch& batch, int32_t n_heads, float scale,
                                     void* out) {
  timed("attention", [&] { inner_.attention_rounded(q, cache, batch, n_heads, scale, out); });
}

void ProfilingOps::silu_mul_rows(const float* gate_up, int32_t n, int32_t ffn, void* out) {
  timed("silu_mul_rows", [&] { inner_.silu_mul_rows(gate_up, n, ffn, out); });
}

void ProfilingOps::moe_route(const float* logits, int32_t n, int32_t n_experts, int32_t k,
                             bool renormalize, int32_t* experts, float* weights) {
  timed("moe_route",
        [&] { inner_.moe_route(logits, n, n_experts, k, renormalize, experts, weights); });
}

void ProfilingOps::gather_rows_rounded(const void* x, int32_t dim, const int32_t* rows,
                                       int32_t n_rows, void* out) {
  timed("gather_rows_rounded", [&] { inner_.gather_rows_rounded(x, dim, rows, n_rows, out); });
}

// One key per weight shape and step (the groups' sizes vary from step to step).
void ProfilingOps::matmul_grouped(const void* x, const int32_t* offsets, int32_t n_groups,
                                  const WeightMatrix* w, float* y, int64_t ldy,
                                  NumericsMode numerics) {
  timed(fmt::format("matmul_grouped {}->{} x{} rows={}", w[0].cols, w[0].rows, n_groups,
                    offsets[n_groups] - offsets[0]),
        [&] { inner_.matmul_grouped(x, offsets, n_groups, w, y, ldy, numerics); });
}

void ProfilingOps::moe_group(const int32_t* experts, int32_t n, int32_t k, int32_t n_experts,
                             int32_t* offsets, int32_t* src_row, int32_t* rows) {
  timed("moe_group", [&] { inner_.moe_group(experts, n, k, n_experts, offsets, src_row, rows); });
}

void ProfilingOps::matmul_grouped_device(const void* x, const int32_t* offsets, int32_t n_groups,
                                         int32_t rows_bound, const WeightMatrix* w, float* y,
                                         int64_t ldy, NumericsMode numerics) {
  timed(fmt::format("matmul_grouped {}->{} x{} rows<={}", w[0].cols, w[0].rows, n_groups,
                    rows_bound),
        [&] { inner_.matmul_grouped_device(x, offsets, n_groups, rows_bound, w, y, ldy, numerics); });
}

void ProfilingOps::moe_combine(const float* y, const int32_t* rows, const float* weights,
                               int32_t n, int32_t k, int32_t dim, const float* shared,
                               const float* shared_gate, float* out) {
  timed("moe_combine",
        [&] { inner_.moe_combine(y, rows, weights, n, k, dim, shared, shared_gate, out); });
}

void ProfilingOps::sample_rows(const float* logits, int32_t rows, int32_t vocab,
                               const SampleRowParams* params, SampleRowResult* out) {
  timed("sample_rows", [&] { inner_.sample_rows(logits, rows, vocab, params, out); });
}

void ProfilingOps::sample_rows_masked(const float* logits, int32_t rows, int32_t vocab,
                                      const SampleRowParams* params, RowMasks masks,
                                      SampleRowResult* out) {
  timed("sample_rows_masked",
        [&] { inner_.sample_rows_masked(logits, rows, vocab, params, masks, out); });
}

void ProfilingOps::apply_logit_penalties(float* logits, int32_t rows, int32_t vocab,
                                         const LogitPenalty* entries, int32_t n) {
  timed("logit_penalties", [&] { inner_.apply_logit_penalties(logits, rows, vocab, entries, n); });
}

}  // namespace detllm::kernels
