// A test backend that forwards every op to another one (the CPU backend by default). The
// negative controls (negative_control_test.cpp, guarantee_matrix_test.cpp, self_check_test.cpp),
// the verified mode's perturbed fast path (perturbed_fast_ops.h) and the bf16 host backend of
// tests/model/synthetic_backend_test.cpp derive from it and override only what they change.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <string_view>

#include "kernels/ops.h"

namespace detllm::conformance {

class DelegatingOps : public kernels::Ops {
 public:
  explicit DelegatingOps(int n_threads = 2, std::string name = "delegating-cpu")
      : DelegatingOps(kernels::make_cpu_ops(n_threads), std::move(name)) {}
  DelegatingOps(std::unique_ptr<kernels::Ops> inner, std::string name)
      : inner_(std::move(inner)), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  bool reads_weight_dtype(DType t) const override { return inner_->reads_weight_dtype(t); }
  bool kv_fp8() const override { return inner_->kv_fp8(); }
  void embedding(const kernels::WeightMatrix& t, const int32_t* ids, int32_t n,
                 float* out) override {
    inner_->embedding(t, ids, n, out);
  }
  void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
               float* out) override {
    inner_->rmsnorm(x, w, n, dim, eps, out);
  }
  void matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
              float* y, NumericsMode numerics) override {
    inner_->matmul(x, m, w, bias, y, numerics);
  }
  void rope(float* x, int32_t n, int32_t h, int32_t d, const int32_t* pos,
            const kernels::RopeTable& t) override {
    inner_->rope(x, n, h, d, pos, t);
  }
  void kv_append(const float* k, const float* v, const kernels::StepBatch& b,
                 const kernels::KvCacheLayer& c) override {
    inner_->kv_append(k, v, b, c);
  }
  void attention(const float* q, const kernels::KvCacheLayer& c, const kernels::StepBatch& b,
                 int32_t h, float s, float* out) override {
    inner_->attention(q, c, b, h, s, out);
  }
  void silu_mul(const float* g, const float* u, int64_t n, float* out) override {
    inner_->silu_mul(g, u, n, out);
  }
  void add(float* x, const float* y, int64_t n) override { inner_->add(x, y, n); }

 protected:
  // Moves every value one ulp up: the smallest change a different reduction order makes.
  static void nudge(float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = std::nextafter(y[i], INFINITY);
  }
  std::unique_ptr<kernels::Ops> inner_;
  std::string name_;
};

}  // namespace detllm::conformance
