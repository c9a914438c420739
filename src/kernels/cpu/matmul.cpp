// CPU matmul y (m, N) = x (m, K) · Wᵀ, W (N, K) row-major. The operation sequence of y[i, j]:
//   acc (8 lanes) = 0;  for c in 0 … K/8-1 in order: acc = fma(x[i, 8c:8c+8], W[j, 8c:8c+8], acc)
//   if K % 8: one more fma with both tails zero-padded to 8 lanes;  y = hsum8(acc) (+ bias[j]).
// Every micro-kernel (R rows × C columns, R*C <= 12) runs exactly that sequence per element, so
// a row's bits never depend on m, its index in the batch, the tile that covered it or n_threads
// (tests/kernels/matmul_invariance_test.cpp checks m = 1…129, every row index, 1–4 threads).
// Test: build/tests/test_kernels --gtest_filter='*Matmul*'; bench: build/benchmarks/kernels_bench.
#include "kernels/cpu/matmul.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/simd.h"

namespace detllm::kernels::cpu {
namespace {

// Weight element access per dtype: full 8-lane loads and zero-padded tails, exact widening.
template <DType T>
struct WeightLoad;
template <>
struct WeightLoad<DType::kF32> {
  using Elem = float;
  static __m256 full(const float* p) { return load8(p); }
  static __m256 tail(const float* p, int n) { return load_tail(p, n); }
};
template <>
struct WeightLoad<DType::kBF16> {
  using Elem = uint16_t;
  static __m256 full(const uint16_t* p) { return load8(p, DType::kBF16); }
  static __m256 tail(const uint16_t* p, int n) { return load_tail(p, n, DType::kBF16); }
};
template <>
struct WeightLoad<DType::kF16> {
  using Elem = uint16_t;
  static __m256 full(const uint16_t* p) { return load8(p, DType::kF16); }
  static __m256 tail(const uint16_t* p, int n) { return load_tail(p, n, DType::kF16); }
};

// The micro-kernel: y[r, c] for R rows of x (stride k) and C rows of W (stride k).
//   x (R, k) at stride k, w (C, k) at stride k, bias (C) or null, y (R, ·) at stride ldy,
//   pf (C, k): weights to prefetch into L1 meanwhile (the next column group's), or w itself.
template <DType T, int R, int C>
inline void tile(const float* x, const typename WeightLoad<T>::Elem* w, int64_t k,
                 const float* bias, float* y, int64_t ldy, const typename WeightLoad<T>::Elem* pf) {
  using L = WeightLoad<T>;
  constexpr int64_t kLineElems = 64 / sizeof(*w);  // weights per 64-byte cache line
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t kk = 0;
  for (; kk + kLanes <= k; kk += kLanes) {
    if (kk % kLineElems == 0)
      for (int c = 0; c < C; ++c)
        _mm_prefetch(reinterpret_cast<const char*>(pf + c * k + kk), _MM_HINT_T0);
    // Register budget: R*C accumulators plus either the C weight vectors (R > C) or the R
    // x vectors (R <= C) held across the inner loop. Only the schedule differs, not any
    // element's sequence of fmas.
    if constexpr (R > C) {
      __m256 wv[C];
      for (int c = 0; c < C; ++c) wv[c] = L::full(w + c * k + kk);
      for (int r = 0; r < R; ++r) {
        const __m256 xv = load8(x + r * k + kk);
        for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
      }
    } else {
      __m256 xv[R];
      for (int r = 0; r < R; ++r) xv[r] = load8(x + r * k + kk);
      for (int c = 0; c < C; ++c) {
        const __m256 wv = L::full(w + c * k + kk);
        for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
      }
    }
  }
  if (kk < k) {  // the fixed tail: one more fma over zero-padded lanes
    const int rest = static_cast<int>(k - kk);
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = L::tail(w + c * k + kk, rest);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = load_tail(x + r * k + kk, rest);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float s = hsum8(acc[r][c]);
      if (bias != nullptr) s += bias[c];
      y[r * ldy + c] = s;
    }
  }
}

// Columns [j0, j1) of R rows: C-wide tiles, then single columns for the remainder. Each tile
// prefetches the same columns pf_shift further on (the next group), when < pf_limit.
template <DType T, int R, int C>
void row_strip(const float* x, const typename WeightLoad<T>::Elem* w, int64_t k, const float* bias,
               float* y, int64_t ldy, int64_t j0, int64_t j1, int64_t pf_shift, int64_t pf_limit) {
  int64_t j = j0;
  for (; j + C <= j1; j += C)
    tile<T, R, C>(x, w + j * k, k, bias != nullptr ? bias + j : nullptr, y + j, ldy,
                  w + (j + pf_shift + C <= pf_limit ? j + pf_shift : j) * k);
  for (; j < j1; ++j)
    tile<T, R, 1>(x, w + j * k, k, bias != nullptr ? bias + j : nullptr, y + j, ldy,
                  w + (j + pf_shift + 1 <= pf_limit ? j + pf_shift : j) * k);
}

// Micro-kernel shapes: every one holds 12 accumulators (R*C = 12), so a group of 12 columns
// is covered by 12/C tiles for any R, and registers (R*C + R or C + 1 <= 16 ymm) never spill.
constexpr int kRowsPerTile = 4;
constexpr int kGroupCols = 12;

// Rows [i0, i1) × columns [j0, j1). Rows in chunks whose x fits in L2; inside a chunk, column
// groups of 12 outer and row strips of up to 4 inner, so a group's weights (12 × K) stay in
// L1/L2 while every row of the chunk passes over them: W streams from DRAM once per chunk.
template <DType T>
void matmul_block(const float* x, const typename WeightLoad<T>::Elem* w, int64_t k, int64_t n,
                  const float* bias, float* y, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  constexpr int64_t kXBudget = 256 * 1024;  // bytes of x per row chunk
  const int64_t row_bytes = std::max<int64_t>(1, k * static_cast<int64_t>(sizeof(float)));
  const int64_t chunk_rows = std::max<int64_t>(kRowsPerTile, kXBudget / row_bytes / 4 * 4);
  for (int64_t ic = i0; ic < i1; ic += chunk_rows) {
    const int64_t ie = std::min(i1, ic + chunk_rows);
    for (int64_t jg = j0; jg < j1; jg += kGroupCols) {
      const int64_t je = std::min(j1, jg + kGroupCols);
      // Decode-sized chunks (<= 8 rows whose x fits in half of L1) run as ONE strip, so W
      // streams through the core once; larger chunks run in strips of 4 over the group,
      // which the first strip brought into L1.
      constexpr int64_t kL1Half = 24 * 1024;
      const int64_t strip_rows =
          ie - ic <= 8 && (ie - ic) * row_bytes <= kL1Half ? ie - ic : kRowsPerTile;
      for (int64_t i = ic; i < ie; i += strip_rows) {
        const float* xr = x + i * k;
        float* yr = y + i * n;
        // The first strip of a chunk streams the group from DRAM: it prefetches the next
        // group; later strips find the group in L1 and prefetch nothing new.
        const int64_t shift = i == ic ? kGroupCols : 0;
        switch (std::min<int64_t>(strip_rows, ie - i)) {
          case 8:
            row_strip<T, 8, 1>(xr, w, k, bias, yr, n, jg, je, shift, j1);
            break;
          case 7:
            row_strip<T, 7, 1>(xr, w, k, bias, yr, n, jg, je, shift, j1);
            break;
          case 6:
            row_strip<T, 6, 2>(xr, w, k, bias, yr, n, jg, je, shift, j1);
            break;
          case 5:
            row_strip<T, 5, 2>(xr, w, k, bias, yr, n, jg, je, shift, j1);
            break;
          case 4:
            row_strip<T, 4, 3>(xr, w, k, bias, yr, n, jg, je, shift, j1);
            break;
          case 3:
            row_strip<T, 3, 4>(xr, w, k, bias, yr, n, jg, je, shift, j1);
            break;
          case 2:
            row_strip<T, 2, 6>(xr, w, k, bias, yr, n, jg, je, shift, j1);
            break;
          default:
            row_strip<T, 1, 12>(xr, w, k, bias, yr, n, jg, je, shift, j1);
            break;
        }
      }
    }
  }
}

template <DType T>
void matmul_typed(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                  const float* bias, float* y) {
  using Elem = typename WeightLoad<T>::Elem;
  const Elem* wp = static_cast<const Elem*>(w.data);
  const int64_t n = w.rows;
  const int64_t k = w.cols;
  // Static 2-D partition: threads take column ranges (units of 12 columns) first, rows only
  // when there are fewer column units than threads. Any partition gives the same bits.
  constexpr int64_t kColUnit = kGroupCols;
  const int64_t n_threads = pool.n_threads();
  const int64_t col_units = (n + kColUnit - 1) / kColUnit;
  const int64_t row_units = (m + kRowsPerTile - 1) / kRowsPerTile;
  const int64_t parts_n = std::min(n_threads, col_units);
  const int64_t parts_m = std::min((n_threads + parts_n - 1) / parts_n, row_units);
  pool.parallel_for(parts_m * parts_n, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t pm = item / parts_n;
      const int64_t pn = item % parts_n;
      const int64_t i0 = std::min(m, row_units * pm / parts_m * kRowsPerTile);
      const int64_t i1 = std::min(m, row_units * (pm + 1) / parts_m * kRowsPerTile);
      const int64_t j0 = std::min(n, col_units * pn / parts_n * kColUnit);
      const int64_t j1 = std::min(n, col_units * (pn + 1) / parts_n * kColUnit);
      matmul_block<T>(x, wp, k, n, bias, y, i0, i1, j0, j1);
    }
  });
}

}  // namespace

void matmul(ThreadPool& pool, const float* x, int32_t m, const WeightMatrix& w, const float* bias,
            float* y) {
  check(m >= 0 && w.rows >= 0 && w.cols >= 0, "matmul: negative shape (m {}, w {}x{})", m, w.rows,
        w.cols);
  if (m == 0 || w.rows == 0) return;
  check(w.data != nullptr && x != nullptr && y != nullptr, "matmul: null pointer");
  switch (w.dtype) {
    case DType::kF32:
      return matmul_typed<DType::kF32>(pool, x, m, w, bias, y);
    case DType::kBF16:
      return matmul_typed<DType::kBF16>(pool, x, m, w, bias, y);
    case DType::kF16:
      return matmul_typed<DType::kF16>(pool, x, m, w, bias, y);
  }
  throw_error("matmul: unsupported weight dtype {}", static_cast<int>(w.dtype));
}

}  // namespace detllm::kernels::cpu
