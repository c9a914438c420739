#include "kernels/cpu/matmul_fp8.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/fp8.h"
#include "kernels/ref/fp8_linear.h"

namespace detllm::kernels::cpu {
namespace {

constexpr int64_t kLanes = 8;

const std::array<float, 256>& fp8_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

// The x rows quantized for one activation scheme (input_scale, act_bound) and decoded to fp32
// (exact): qx (m, k) and their scales s (m), or for kF8E4M3G128 one per 128-column group
// (m, n_groups).
struct QuantizedX {
  float input_scale, act_bound;
  std::vector<float> qx, s;
};

}  // namespace

void matmul_fp8(ThreadPool& pool, const float* x, int32_t m, const WeightMatrix& w,
                const float* bias, float* y) {
  check(dtype_is_fp8(w.dtype), "matmul_fp8: weight dtype {} is not FP8", dtype_name(w.dtype));
  const int64_t k = w.cols, n = w.rows, row_bytes = dtype_row_bytes(w.dtype, k);
  if (m == 0 || n == 0) return;
  const auto* wp = static_cast<const uint8_t*>(w.data);
  const auto& table = fp8_table();
  // Each distinct activation scheme among the rows (one, or q/k/v's three static scales).
  std::vector<QuantizedX> schemes;
  std::vector<int32_t> scheme_of(static_cast<size_t>(n));
  const bool groups = w.dtype == DType::kF8E4M3G128;  // activation scales per 128 columns
  const int64_t n_g = groups ? (k + kFp8ScaleBlock - 1) / kFp8ScaleBlock : 1;
  std::vector<uint8_t> q(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = wp + j * row_bytes;
    const float in = fp8_row_input_scale(row), bound = fp8_row_act_bound(row);
    size_t s = 0;
    while (s < schemes.size() && !(schemes[s].input_scale == in && schemes[s].act_bound == bound)) ++s;
    if (s == schemes.size()) {
      QuantizedX qx{in, bound, std::vector<float>(static_cast<size_t>(m * k)),
                    std::vector<float>(static_cast<size_t>(m * n_g))};
      for (int32_t i = 0; i < m; ++i) {
        const float* xi = x + static_cast<int64_t>(i) * k;
        float* si = qx.s.data() + static_cast<int64_t>(i) * n_g;
        if (groups) {
          ref::fp8_quantize_activation_groups(xi, k, in, bound, q.data(), si);
        } else {
          *si = ref::fp8_activation_scale(xi, k, in, bound);
          ref::fp8_quantize_activation(xi, k, *si, q.data());
        }
        for (int64_t c = 0; c < k; ++c) qx.qx[static_cast<size_t>(i * k + c)] = table[q[c]];
      }
      schemes.push_back(std::move(qx));
    }
    scheme_of[static_cast<size_t>(j)] = static_cast<int32_t>(s);
  }
  const bool blocks = dtype_fp8_blocks(w.dtype);
  const int64_t n_groups = (n + kLanes - 1) / kLanes;
  pool.parallel_for(n_groups, [&](int64_t g0, int64_t g1) {
    // Eight weight rows decoded side by side: wt[c * 8 + l] = dec(w[j0 + l, c]).
    std::vector<float> wt(static_cast<size_t>(k * kLanes));
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t j0 = g * kLanes, lanes = std::min(kLanes, n - j0);
      for (int64_t l = 0; l < kLanes; ++l) {
        const int64_t j = j0 + std::min(l, lanes - 1);  // a short group repeats its last row
        const uint8_t* codes = fp8_row_codes(w.dtype, wp + j * row_bytes, k);
        for (int64_t c = 0; c < k; ++c) wt[static_cast<size_t>(c * kLanes + l)] = table[codes[c]];
      }
      for (int32_t i = 0; i < m; ++i) {
        // Lanes of one group may use different schemes (a fused matrix's boundary): run the
        // group once per scheme present and keep each lane's own.
        alignas(32) float out[kLanes];
        for (int64_t l = 0; l < lanes; ++l) {
          const int32_t sc = scheme_of[static_cast<size_t>(j0 + l)];
          if (l > 0 && sc == scheme_of[static_cast<size_t>(j0 + l - 1)]) continue;
          const QuantizedX& qs = schemes[static_cast<size_t>(sc)];
          const float* qx = qs.qx.data() + static_cast<int64_t>(i) * k;
          alignas(32) float acc[kLanes];
          if (!blocks) {
            __m256 a = _mm256_setzero_ps();
            for (int64_t c = 0; c < k; ++c) {
              a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_set1_ps(qx[c]),
                                                 _mm256_loadu_ps(&wt[static_cast<size_t>(c * kLanes)])));
            }
            _mm256_store_ps(acc, a);
          } else {
            alignas(32) float sw[kLanes];
            __m256 a = _mm256_setzero_ps();
            for (int64_t b0 = 0; b0 < k; b0 += kFp8ScaleBlock) {
              __m256 p = _mm256_setzero_ps();
              for (int64_t c = b0; c < std::min(k, b0 + kFp8ScaleBlock); ++c) {
                p = _mm256_add_ps(p, _mm256_mul_ps(_mm256_set1_ps(qx[c]),
                                                   _mm256_loadu_ps(&wt[static_cast<size_t>(c * kLanes)])));
              }
              for (int64_t l2 = 0; l2 < kLanes; ++l2) {
                const int64_t j = j0 + std::min(l2, lanes - 1);
                sw[l2] = fp8_row_weight_scale(wp + j * row_bytes, b0 / kFp8ScaleBlock);
              }
              if (groups) {  // (P_b · s_b) · s_w[b]: the group's activation scale first
                const float sg = qs.s[static_cast<size_t>(i * n_g + b0 / kFp8ScaleBlock)];
                p = _mm256_mul_ps(p, _mm256_set1_ps(sg));
              }
              a = _mm256_add_ps(a, _mm256_mul_ps(p, _mm256_load_ps(sw)));
            }
            _mm256_store_ps(acc, a);
          }
          for (int64_t l2 = l; l2 < lanes && scheme_of[static_cast<size_t>(j0 + l2)] == sc; ++l2) {
            if (groups) {  // the scales are inside the sum
              out[l2] = acc[l2];
              continue;
            }
            const float sx = qs.s[static_cast<size_t>(i)];
            out[l2] = blocks ? acc[l2] * sx
                             : acc[l2] * sx * fp8_row_weight_scale(wp + (j0 + l2) * row_bytes, 0);
          }
        }
        float* yi = y + static_cast<int64_t>(i) * n;
        for (int64_t l = 0; l < lanes; ++l) yi[j0 + l] = bias ? out[l] + bias[j0 + l] : out[l];
      }
    }
  });
}

}  // namespace detllm::kernels::cpu
