// CPU rope: per token, angle_i = float(pos) * inv_freq[i] (fp32), c = cosf, s = sinf, then for
// every head x0' = x0*c - x1*s, x1' = x1*c + x0*s (mul, mul, sub/add: no fma), pairing d and
// d + rot_dim/2. A pure function of (x, pos): bit-equal to ref. Test: --gtest_filter='*Rope*'.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/simd.h"

namespace detllm::kernels::cpu {

void rope(ThreadPool& pool, float* x, int32_t n, int32_t n_heads, int32_t head_dim,
          const int32_t* positions, const RopeTable& table) {
  const int32_t half = table.rot_dim / 2;
  check(n >= 0 && n_heads > 0 && head_dim > 0, "rope: bad shape (n {}, heads {}, head_dim {})", n,
        n_heads, head_dim);
  check(table.rot_dim % 2 == 0 && table.rot_dim <= head_dim &&
            static_cast<int64_t>(table.inv_freq.size()) == half,
        "rope: table has rot_dim {} and {} frequencies; need an even rot_dim <= head_dim {} and "
        "rot_dim/2 frequencies",
        table.rot_dim, table.inv_freq.size(), head_dim);
  if (half == 0) return;
  pool.parallel_for(n, [&](int64_t begin, int64_t end) {
    std::vector<float> cs(static_cast<size_t>(2) * half);  // cos (half) then sin (half)
    float* c = cs.data();
    float* s = cs.data() + half;
    for (int64_t t = begin; t < end; ++t) {
      const float pos = static_cast<float>(positions[t]);
      for (int32_t i = 0; i < half; ++i) {
        const float angle = pos * table.inv_freq[i];
        c[i] = std::cos(angle);
        s[i] = std::sin(angle);
      }
      for (int32_t h = 0; h < n_heads; ++h) {
        float* x0 = x + (t * n_heads + h) * head_dim;
        float* x1 = x0 + half;
        int32_t i = 0;
        for (; i + kLanes <= half; i += kLanes) {
          const __m256 a = load8(x0 + i), b = load8(x1 + i);
          const __m256 cv = load8(c + i), sv = load8(s + i);
          _mm256_storeu_ps(x0 + i, _mm256_sub_ps(_mm256_mul_ps(a, cv), _mm256_mul_ps(b, sv)));
          _mm256_storeu_ps(x1 + i, _mm256_add_ps(_mm256_mul_ps(b, cv), _mm256_mul_ps(a, sv)));
        }
        for (; i < half; ++i) {
          const float a = x0[i], b = x1[i];
          x0[i] = a * c[i] - b * s[i];
          x1[i] = b * c[i] + a * s[i];
        }
      }
    }
  });
}

}  // namespace detllm::kernels::cpu
