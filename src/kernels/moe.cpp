// Host defaults of the mixture-of-experts ops (ops.h): routing by one pass over each row that
// keeps the k best experts sorted, the grouped GEMM as one matmul_rounded per group, and the
// per-token combine. The plain reference is kernels/ref/moe_ref.h; backend_ops_test checks
// every backend against it. Test: build/tests/test_kernels --gtest_filter='*Moe*'.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/sampling/sampler_math.h"

namespace detllm::kernels {
namespace {

using sampler_math::exp_nonpositive;
using sampler_math::float_of;

// The ranking key of a logit: NaN ranks as -inf.
inline float rank_key(float v) {
  return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
}

// sigmoid(g) in double with our exp (no libm), rounded once to fp32.
inline float sigmoid(float g) {
  const double x = g;
  if (x >= 0) return float_of(1.0 / (1.0 + exp_nonpositive(-x)));
  const double e = exp_nonpositive(x);
  return float_of(e / (1.0 + e));
}

}  // namespace

void Ops::moe_route(const float* logits, int32_t n, int32_t n_experts, int32_t k, bool renormalize,
                    int32_t* experts, float* weights) {
  check(host_memory(), "{}: moe_route's default reads host memory", name());
  check(k >= 1 && k <= n_experts, "moe_route: top-{} of {} experts", k, n_experts);
  std::vector<double> e(static_cast<size_t>(n_experts));
  for (int32_t t = 0; t < n; ++t) {
    const float* l = logits + int64_t{t} * n_experts;
    int32_t* ids = experts + int64_t{t} * k;
    float* w = weights + int64_t{t} * k;
    // Insertion into the sorted best-k: an expert enters only ahead of a strictly lower key,
    // so among equal logits the one seen first — the lower index — stays ahead.
    int32_t n_kept = 0;
    for (int32_t j = 0; j < n_experts; ++j) {
      const float key = rank_key(l[j]);
      int32_t pos = n_kept;
      while (pos > 0 && key > rank_key(l[ids[pos - 1]])) --pos;
      if (pos >= k) continue;
      for (int32_t q = std::min(n_kept, k - 1); q > pos; --q) ids[q] = ids[q - 1];
      ids[pos] = j;
      if (n_kept < k) ++n_kept;
    }
    // Softmax: exp(l - max) in double, summed in expert order (all) or rank order (the k).
    const double max = rank_key(l[ids[0]]);
    double sum = 0;
    for (int32_t j = 0; j < n_experts; ++j) {
      e[j] = exp_nonpositive(static_cast<double>(l[j]) - max);
      sum += e[j];
    }
    if (renormalize) {
      sum = 0;
      for (int32_t r = 0; r < k; ++r) sum += e[ids[r]];
    }
    for (int32_t r = 0; r < k; ++r) w[r] = float_of(e[ids[r]] / sum);
  }
}

void Ops::gather_rows_rounded(const void* x, int32_t dim, const int32_t* rows, int32_t n_rows,
                              void* out) {
  check(gemm_input_dtype() == DType::kF32,
        "{}: gather_rows_rounded's default copies fp32 rows; a backend with GEMM inputs of {} "
        "overrides it",
        name(), dtype_name(gemm_input_dtype()));
  gather_rows(static_cast<const float*>(x), dim, rows, n_rows, static_cast<float*>(out));
}

void Ops::matmul_grouped(const void* x, const int32_t* offsets, int32_t n_groups,
                         const WeightMatrix* w, float* y, int64_t ldy,
                         NumericsMode numerics) {
  const size_t esz = dtype_size(gemm_input_dtype());
  for (int32_t g = 0; g < n_groups; ++g) {
    const int32_t first = offsets[g], rows = offsets[g + 1] - offsets[g];
    check(rows >= 0, "matmul_grouped: group {} has {} rows", g, rows);
    if (rows == 0) continue;
    const auto* xg = static_cast<const char*>(x) + static_cast<size_t>(first) * w[g].cols * esz;
    matmul_rounded(xg, rows, w[g], nullptr, y + int64_t{first} * ldy, ldy, numerics);
  }
}

void Ops::moe_group(const int32_t* experts, int32_t n, int32_t k, int32_t n_experts,
                    int32_t* offsets, int32_t* src_row, int32_t* rows) {
  check(host_memory(), "{}: moe_group's default reads host memory", name());
  const int32_t nk = n * k;
  std::fill_n(offsets, n_experts + 1, 0);
  for (int32_t i = 0; i < nk; ++i) {
    check(experts[i] >= 0 && experts[i] < n_experts, "moe_group: expert {} of {}", experts[i],
          n_experts);
    ++offsets[experts[i] + 1];
  }
  for (int32_t e = 0; e < n_experts; ++e) offsets[e + 1] += offsets[e];
  std::vector<int32_t> cursor(offsets, offsets + n_experts);
  for (int32_t i = 0; i < nk; ++i) {
    const int32_t row = cursor[static_cast<size_t>(experts[i])]++;
    src_row[row] = i / k;
    rows[i] = row;
  }
}

void Ops::matmul_grouped_device(const void* x, const int32_t* offsets, int32_t n_groups,
                                int32_t /*rows_bound*/, const WeightMatrix* w, float* y,
                                int64_t ldy, NumericsMode numerics) {
  std::vector<int32_t> host(static_cast<size_t>(n_groups) + 1);
  download(host.data(), offsets, host.size() * sizeof(int32_t));
  matmul_grouped(x, host.data(), n_groups, w, y, ldy, numerics);
}

void Ops::moe_combine(const float* y, const int32_t* rows, const float* weights, int32_t n,
                      int32_t k, int32_t dim, const float* shared, const float* shared_gate,
                      float* out) {
  check(host_memory(), "{}: moe_combine's default reads host memory", name());
  for (int32_t t = 0; t < n; ++t) {
    float* o = out + int64_t{t} * dim;
    for (int32_t d = 0; d < dim; ++d) o[d] = 0.0f;
    for (int32_t r = 0; r < k; ++r) {
      const float wr = weights[int64_t{t} * k + r];
      const float* yr = y + int64_t{rows[int64_t{t} * k + r]} * dim;
      for (int32_t d = 0; d < dim; ++d) o[d] += wr * yr[d];
    }
    if (shared != nullptr) {
      const float s = sigmoid(shared_gate[t]);
      const float* sh = shared + int64_t{t} * dim;
      for (int32_t d = 0; d < dim; ++d) o[d] += s * sh[d];
    }
  }
}

}  // namespace detllm::kernels
