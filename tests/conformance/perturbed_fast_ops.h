// Test backend for the verified mode (tests/conformance): the CPU backend whose FAST GEMM
// numerics differ from its invariant ones. On the CPU both numerics are the same kernels, so
// without this a verified-mode test would never see a candidate rejected. While the runner
// has selected NumericsMode::kFast (Ops::set_gemm_numerics), matmul adds to every output a
// small epsilon that depends on the number of rows m — like a library GEMM whose split-K
// changes with the batch — scaled by `scale` (relative to |y| + 1). While kInvariant is
// selected (every other mode, and the verified mode's invariant steps) it is the CPU backend
// bit for bit.
#pragma once

#include <cmath>
#include <memory>

#include "kernels/ops.h"

namespace detllm::conformance {

class PerturbedFastOps final : public kernels::Ops {
 public:
  PerturbedFastOps(int n_threads, float scale)
      : inner_(kernels::make_cpu_ops(n_threads)), scale_(scale) {}
  std::string_view name() const override { return "cpu-perturbed-fast"; }
  void set_gemm_numerics(NumericsMode mode) override { mode_ = mode; }
  NumericsMode gemm_numerics() const override { return mode_; }
  int64_t n_fast_matmuls() const { return n_fast_; }

  void embedding(const kernels::WeightMatrix& t, const int32_t* ids, int32_t n,
                 float* out) override {
    inner_->embedding(t, ids, n, out);
  }
  void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
               float* out) override {
    inner_->rmsnorm(x, w, n, dim, eps, out);
  }
  void matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
              float* y) override {
    inner_->matmul(x, m, w, bias, y);
    if (mode_ != NumericsMode::kFast) return;
    ++n_fast_;
    const float eps = scale_ * static_cast<float>(1 + m % 5);
    for (int64_t i = 0; i < int64_t{m} * w.rows; ++i) {
      const float sign = ((i * 2654435761LL + m) >> 7) & 1 ? 1.0f : -1.0f;
      y[i] += sign * eps * (std::fabs(y[i]) + 1.0f);
    }
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

 private:
  std::unique_ptr<kernels::Ops> inner_;
  float scale_;
  NumericsMode mode_ = NumericsMode::kInvariant;
  int64_t n_fast_ = 0;
};

}  // namespace detllm::conformance
