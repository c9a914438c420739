// Plain loops for the mixture-of-experts ops (see moe_ref.h).
#include "kernels/ref/moe_ref.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/sampling/sampler_math.h"

namespace detllm::kernels::ref {
namespace {

float key_of(float v) {
  return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
}

}  // namespace

void moe_route(const float* logits, int32_t n, int32_t n_experts, int32_t k, bool renormalize,
               int32_t* experts, float* weights) {
  check(k >= 1 && k <= n_experts, "ref moe_route: top-{} of {} experts", k, n_experts);
  for (int32_t t = 0; t < n; ++t) {
    const float* l = logits + int64_t{t} * n_experts;
    std::vector<bool> chosen(static_cast<size_t>(n_experts), false);
    for (int32_t r = 0; r < k; ++r) {
      int32_t best = -1;
      for (int32_t j = 0; j < n_experts; ++j) {
        if (chosen[j]) continue;
        if (best < 0 || key_of(l[j]) > key_of(l[best])) best = j;
      }
      chosen[best] = true;
      experts[int64_t{t} * k + r] = best;
    }
    const double max = key_of(l[experts[int64_t{t} * k]]);
    double sum = 0;
    for (int32_t j = 0; j < n_experts; ++j)
      sum += sampler_math::exp_nonpositive(static_cast<double>(l[j]) - max);
    if (renormalize) {
      sum = 0;
      for (int32_t r = 0; r < k; ++r) {
        const int32_t j = experts[int64_t{t} * k + r];
        sum += sampler_math::exp_nonpositive(static_cast<double>(l[j]) - max);
      }
    }
    for (int32_t r = 0; r < k; ++r) {
      const int32_t j = experts[int64_t{t} * k + r];
      const double e = sampler_math::exp_nonpositive(static_cast<double>(l[j]) - max);
      weights[int64_t{t} * k + r] = static_cast<float>(e / sum);
    }
  }
}

void moe_combine(const float* y, const int32_t* rows, const float* weights, int32_t n, int32_t k,
                 int32_t dim, const float* shared, const float* shared_gate, float* out) {
  for (int32_t t = 0; t < n; ++t) {
    float s = 0.0f;
    if (shared != nullptr) {
      const double g = shared_gate[t];
      s = static_cast<float>(g >= 0 ? 1.0 / (1.0 + sampler_math::exp_nonpositive(-g))
                                    : sampler_math::exp_nonpositive(g) /
                                          (1.0 + sampler_math::exp_nonpositive(g)));
    }
    for (int32_t d = 0; d < dim; ++d) {
      float acc = 0.0f;
      for (int32_t r = 0; r < k; ++r) {
        const float prod =
            weights[int64_t{t} * k + r] * y[int64_t{rows[int64_t{t} * k + r]} * dim + d];
        acc = acc + prod;
      }
      if (shared != nullptr) acc = acc + s * shared[int64_t{t} * dim + d];
      out[int64_t{t} * dim + d] = acc;
    }
  }
}

}  // namespace detllm::kernels::ref
