// CPU RMSNorm. Per row, fixed sequence: acc (8 lanes) = Σ fma(x_c, x_c, acc) over 8-wide chunks
// in order, zero-padded tail chunk, ss = hsum8(acc); r = 1 / sqrtf(ss / dim + eps);
// out = (x * r) * w. Depends on dim only. Test: build/tests/test_kernels
// --gtest_filter='*Rmsnorm*'.
#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/simd.h"

namespace detllm::kernels::cpu {
namespace {

void rmsnorm_row(const float* x, const float* w, int32_t dim, float eps, float* out) {
  __m256 acc = _mm256_setzero_ps();
  int32_t d = 0;
  for (; d + kLanes <= dim; d += kLanes) {
    const __m256 v = load8(x + d);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  const int rest = dim - d;
  if (rest > 0) {
    const __m256 v = load_tail(x + d, rest);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  const float r = 1.0f / std::sqrt(hsum8(acc) / static_cast<float>(dim) + eps);
  const __m256 rv = _mm256_set1_ps(r);
  for (d = 0; d + kLanes <= dim; d += kLanes)
    _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_mul_ps(load8(x + d), rv), load8(w + d)));
  if (rest > 0)
    store_tail(out + d,
               _mm256_mul_ps(_mm256_mul_ps(load_tail(x + d, rest), rv), load_tail(w + d, rest)),
               rest);
}

}  // namespace

void rmsnorm(ThreadPool& pool, const float* x, const float* w, int32_t n, int32_t dim, float eps,
             float* out) {
  check(n >= 0 && dim > 0, "rmsnorm: bad shape (n {}, dim {})", n, dim);
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) rmsnorm_row(x + i * dim, w, dim, eps, out + i * dim);
      },
      /*min_items_per_part=*/std::max<int64_t>(1, 16384 / dim));
}

}  // namespace detllm::kernels::cpu
