// Test backend for the verified mode (tests/conformance): the CPU backend whose FAST GEMM
// numerics differ from its invariant ones. On the CPU both numerics are the same kernels, so
// without this a verified-mode test would never see a candidate rejected. While the runner
// asks a matmul for NumericsMode::kFast (the step's StepBatch::numerics), it adds to every output a
// small epsilon that depends on the number of rows m — like a library GEMM whose split-K
// changes with the batch — scaled by `scale` (relative to |y| + 1); at one m every row is
// treated alike (the padded mode's fixed shape relies on that, as on a real library GEMM). While
// kInvariant is asked (every other mode, and the verified mode's invariant steps) it is the CPU
// backend bit for bit.
#pragma once

#include <cmath>
#include <memory>

#include "conformance/delegating_ops.h"
#include "kernels/ops.h"

namespace detllm::conformance {

class PerturbedFastOps final : public DelegatingOps {
 public:
  PerturbedFastOps(int n_threads, float scale)
      : DelegatingOps(n_threads, "cpu-perturbed-fast"), scale_(scale) {}
  int64_t n_fast_matmuls() const { return n_fast_; }

  void matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
              float* y, NumericsMode numerics) override {
    inner_->matmul(x, m, w, bias, y, numerics);
    if (numerics != NumericsMode::kFast) return;
    ++n_fast_;
    const float eps = scale_ * static_cast<float>(1 + m % 5);
    for (int64_t i = 0; i < int64_t{m} * w.rows; ++i) {
      // A function of (m, output column, value), not of the row's place in the batch: like a
      // library GEMM whose kernel (tile, split-K) is chosen from m, each row computed alike.
      const int64_t col = i % w.rows;
      const float sign = ((col * 2654435761LL + m) >> 7) & 1 ? 1.0f : -1.0f;
      y[i] += sign * eps * (std::fabs(y[i]) + 1.0f);
    }
  }

 private:
  float scale_;
  int64_t n_fast_ = 0;
};

}  // namespace detllm::conformance
