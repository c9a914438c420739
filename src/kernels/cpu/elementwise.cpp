// CPU elementwise ops. silu uses exp8 (simd.h) on every element, tails through a zero-padded
// 8-lane buffer, so an element's bits do not depend on where it sits in the array.
// Test: build/tests/test_kernels --gtest_filter='*Elementwise*'.
#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/quant.h"
#include "kernels/cpu/simd.h"

namespace detllm::kernels::cpu {
namespace {

constexpr int64_t kElementsPerPart = 1 << 15;  // below this, threads cost more than they save

inline __m256 silu_mul8(__m256 g, __m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
}

}  // namespace

void silu_mul(ThreadPool& pool, const float* gate, const float* up, int64_t n, float* out) {
  check(n >= 0, "silu_mul: negative n {}", n);
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        int64_t i = begin;
        for (; i + kLanes <= end; i += kLanes)
          _mm256_storeu_ps(out + i, silu_mul8(load8(gate + i), load8(up + i)));
        if (i < end) {
          const int rest = static_cast<int>(end - i);
          store_tail(out + i, silu_mul8(load_tail(gate + i, rest), load_tail(up + i, rest)), rest);
        }
      },
      kElementsPerPart);
}

void add(ThreadPool& pool, float* x, const float* y, int64_t n) {
  check(n >= 0, "add: negative n {}", n);
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) x[i] += y[i];
      },
      kElementsPerPart);
}

void embedding(ThreadPool& pool, const WeightMatrix& table, const int32_t* ids, int32_t n,
               float* out) {
  check(n >= 0 && table.cols > 0 && table.data != nullptr, "embedding: bad table or n {}", n);
  for (int32_t i = 0; i < n; ++i)
    check(ids[i] >= 0 && ids[i] < table.rows, "embedding: token id {} outside vocabulary 0..{}",
          ids[i], table.rows - 1);
  const int64_t dim = table.cols;
  pool.parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          float* dst = out + i * dim;
          const int64_t row = ids[i];
          if (table.dtype == DType::kF32) {
            std::memcpy(dst, static_cast<const float*>(table.data) + row * dim,
                        sizeof(float) * dim);
            continue;
          }
          if (dtype_is_block(table.dtype)) {  // a row of blocks, decoded as core/quant.h does
            const int64_t row_bytes = dtype_row_bytes(table.dtype, dim);
            dequantize_row(table.dtype, static_cast<const uint8_t*>(table.data) + row * row_bytes,
                           dst, dim);
            continue;
          }
          const uint16_t* src = static_cast<const uint16_t*>(table.data) + row * dim;
          for (int64_t d = 0; d < dim; ++d)
            dst[d] = table.dtype == DType::kBF16 ? bf16_to_f32(src[d]) : f16_to_f32(src[d]);
        }
      },
      /*min_items_per_part=*/std::max<int64_t>(1, kElementsPerPart / dim));
}

}  // namespace detllm::kernels::cpu
