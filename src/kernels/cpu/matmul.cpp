// CPU matmul y (m, N) = x (m, K) · Wᵀ, W (N, K) row-major. The operation sequence of y[i, j]:
//   acc (8 lanes) = 0;  for c in 0 … K/8-1 in order: acc = fma(x[i, 8c:8c+8], W[j, 8c:8c+8], acc)
//   if K % 8: one more fma with both tails zero-padded to 8 lanes;  y = hsum8(acc) (+ bias[j]).
// Every micro-kernel (R rows × C columns, R*C <= 12) runs exactly that sequence per element, so
// a row's bits never depend on m, its index in the batch, the tile that covered it or n_threads
// (tests/kernels/matmul_invariance_test.cpp checks m = 1…129, every row index, 1–4 threads).
// Test: build/tests/test_kernels --gtest_filter='*Matmul*'; bench: build/benchmarks/kernels_bench.
#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/quant_decode.h"
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

// The tiles' end: y[r * ldy + c] = hsum8(acc[r][c]) (+ bias[c]).
template <int R, int C>
inline void store_tile(const __m256 (&acc)[R][C], const float* bias, float* y, int64_t ldy) {
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float s = hsum8(acc[r][c]);
      if (bias != nullptr) s += bias[c];
      y[r * ldy + c] = s;
    }
  }
}

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
  store_tile<R, C>(acc, bias, y, ldy);
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

// row_strip over `rows` (1..8) rows: the tile width each strip height runs with (8 and 7 rows:
// 1 column; 6, 5: 2; 4: 3; 3: 4; 2: 6; 1: 12), so a shape always gets the same tiles.
template <DType T>
void row_strip_of(int64_t rows, const float* x, const typename WeightLoad<T>::Elem* w, int64_t k,
                  const float* bias, float* y, int64_t ldy, int64_t j0, int64_t j1,
                  int64_t pf_shift, int64_t pf_limit) {
  switch (rows) {
    case 8:
      return row_strip<T, 8, 1>(x, w, k, bias, y, ldy, j0, j1, pf_shift, pf_limit);
    case 7:
      return row_strip<T, 7, 1>(x, w, k, bias, y, ldy, j0, j1, pf_shift, pf_limit);
    case 6:
      return row_strip<T, 6, 2>(x, w, k, bias, y, ldy, j0, j1, pf_shift, pf_limit);
    case 5:
      return row_strip<T, 5, 2>(x, w, k, bias, y, ldy, j0, j1, pf_shift, pf_limit);
    case 4:
      return row_strip<T, 4, 3>(x, w, k, bias, y, ldy, j0, j1, pf_shift, pf_limit);
    case 3:
      return row_strip<T, 3, 4>(x, w, k, bias, y, ldy, j0, j1, pf_shift, pf_limit);
    case 2:
      return row_strip<T, 2, 6>(x, w, k, bias, y, ldy, j0, j1, pf_shift, pf_limit);
    default:
      return row_strip<T, 1, 12>(x, w, k, bias, y, ldy, j0, j1, pf_shift, pf_limit);
  }
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
        row_strip_of<T>(std::min<int64_t>(strip_rows, ie - i), xr, w, k, bias, yr, n, jg, je, shift,
                        j1);
      }
    }
  }
}

// The storage element of a weight dtype: the widened types' own, bytes for block types.
template <DType T, bool = dtype_is_block(T)>
struct ElemOf {
  using type = uint8_t;
};
template <DType T>
struct ElemOf<T, false> {
  using type = typename WeightLoad<T>::Elem;
};

// The fp32 strips of matmul_block over rows [i, ie) of one column group whose weights are
// w (cols, k) fp32 (a decoded group, already in L1/L2): strips of 4 rows (4 × 3 tiles load
// fewer x vectors per fma than one 8 × 1 strip), the remainder as one narrower strip. Any
// strip shape runs the same per-element sequence.
inline void group_strips(const float* x, const float* w, int64_t k, int64_t n, const float* bias,
                         float* y, int64_t ic, int64_t ie, int64_t jg, int64_t cols) {
  constexpr int64_t strip_rows = kRowsPerTile;
  const float* b = bias != nullptr ? bias + jg : nullptr;
  for (int64_t i = ic; i < ie; i += strip_rows) {
    const float* xr = x + i * k;
    float* yr = y + i * n + jg;
    row_strip_of<DType::kF32>(std::min<int64_t>(strip_rows, ie - i), xr, w, k, b, yr, n, 0, cols, 0,
                              cols);
  }
}

// Decode-sized steps (R <= 4 rows) on 32-element block types: each block is decoded into
// registers (decode_block32_regs) and used at once, no scratch. Per element the same sequence
// as tile(): acc = fma(x[8c:8c+8], w[8c:8c+8], acc) for c = 0, 1, … in order (k is whole
// blocks, so no tail), y = hsum8(acc) (+ bias).
//   x (R, k) at stride k; w: C rows of row_bytes bytes; y (R, ·) at stride ldy.
//   pf, pf_bytes: a later tile's weights, prefetched into L1 meanwhile, spread over the blocks.
template <DType T, int R, int C>
inline void tile_block32(const float* x, const uint8_t* w, int64_t row_bytes, int64_t k,
                         const float* bias, float* y, int64_t ldy, const uint8_t* pf,
                         int64_t pf_bytes) {
  constexpr int64_t kBlockBytes = dtype_block_bytes(T);
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t n_blocks = k / 32;
  const int64_t pf_step = (pf_bytes / 64 + n_blocks - 1) / n_blocks * 64;  // bytes per block
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int64_t off = b * pf_step; off < std::min(pf_bytes, (b + 1) * pf_step); off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(pf + off), _MM_HINT_T0);
    for (int c = 0; c < C; ++c) {
      __m256 wv[4];
      decode_block32_regs<T>(w + c * row_bytes + b * kBlockBytes, wv);
      for (int g = 0; g < 4; ++g)
        for (int r = 0; r < R; ++r)
          acc[r][c] = _mm256_fmadd_ps(load8(x + r * k + 32 * b + 8 * g), wv[g], acc[r][c]);
    }
  }
  store_tile<R, C>(acc, bias, y, ldy);
}

// Columns [j0, j1) of R <= 4 rows through tile_block32: C-wide tiles, then single columns.
template <DType T, int R, int C>
void strip_block32(const float* x, const uint8_t* w, int64_t row_bytes, int64_t k,
                   const float* bias, float* y, int64_t ldy, int64_t j0, int64_t j1) {
  // Each tile prefetches the weights of the columns 8 on (two 4-column tiles ahead).
  constexpr int64_t kPfCols = 8;
  auto pf_of = [&](int64_t j, int64_t cols, int64_t* bytes) {
    const int64_t from = std::min(j1, j + kPfCols);
    *bytes = (std::min(j1, from + cols) - from) * row_bytes;
    return w + from * row_bytes;
  };
  int64_t j = j0, pf_bytes = 0;
  for (; j + C <= j1; j += C) {
    const uint8_t* pf = pf_of(j, C, &pf_bytes);
    tile_block32<T, R, C>(x, w + j * row_bytes, row_bytes, k, bias != nullptr ? bias + j : nullptr,
                          y + j, ldy, pf, pf_bytes);
  }
  for (; j < j1; ++j) {
    const uint8_t* pf = pf_of(j, 1, &pf_bytes);
    tile_block32<T, R, 1>(x, w + j * row_bytes, row_bytes, k, bias != nullptr ? bias + j : nullptr,
                          y + j, ldy, pf, pf_bytes);
  }
}

template <DType T>
void matmul_block32_small(const float* x, const uint8_t* w, int64_t k, int64_t n, const float* bias,
                          float* y, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (i1 <= i0) return;
  const int64_t row_bytes = dtype_row_bytes(T, k);
  float* yr = y + i0 * n;
  const float* xr = x + i0 * k;
  switch (i1 - i0) {
    case 4:
      return strip_block32<T, 4, 2>(xr, w, row_bytes, k, bias, yr, n, j0, j1);
    case 3:
      return strip_block32<T, 3, 3>(xr, w, row_bytes, k, bias, yr, n, j0, j1);
    case 2:
      return strip_block32<T, 2, 4>(xr, w, row_bytes, k, bias, yr, n, j0, j1);
    default:
      return strip_block32<T, 1, 4>(xr, w, row_bytes, k, bias, yr, n, j0, j1);
  }
}

// Block-type weights (GGUF quants): per row chunk and column group, the group's 12 rows are
// decoded (quant_decode.h: the bits of core/quant.h) into a per-thread fp32 scratch of
// 12 × k, which the fp32 strips then read from L1/L2. So y has exactly the bits of the fp32
// matmul on the dequantized weights, for every m, row index, tile and thread count; only
// ~0.56 (Q4_1) to 1.06 (Q8_0) bytes per weight stream from memory instead of 4.
void matmul_block_quant(DType t, const float* x, const uint8_t* w, int64_t k, int64_t n,
                        const float* bias, float* y, int64_t i0, int64_t i1, int64_t j0,
                        int64_t j1) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<size_t>(kGroupCols * k)) scratch.resize(kGroupCols * k);
  const int64_t w_row_bytes = dtype_row_bytes(t, k);
  constexpr int64_t kXBudget = 256 * 1024;
  const int64_t row_bytes = std::max<int64_t>(1, k * static_cast<int64_t>(sizeof(float)));
  const int64_t chunk_rows = std::max<int64_t>(kRowsPerTile, kXBudget / row_bytes / 4 * 4);
  for (int64_t ic = i0; ic < i1; ic += chunk_rows) {
    const int64_t ie = std::min(i1, ic + chunk_rows);
    for (int64_t jg = j0; jg < j1; jg += kGroupCols) {
      const int64_t cols = std::min(j1, jg + kGroupCols) - jg;
      // Prefetch the next group's blocks while this one is decoded and used.
      const int64_t next = std::min(j1, jg + kGroupCols);
      const int64_t next_end = std::min(j1, next + kGroupCols);
      const uint8_t* pf = w + next * w_row_bytes;
      const int64_t pf_bytes = (next_end - next) * w_row_bytes;
      for (int64_t off = 0; off < pf_bytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(pf + off), _MM_HINT_T1);
      for (int64_t c = 0; c < cols; ++c)
        decode_row(t, w + (jg + c) * w_row_bytes, scratch.data() + c * k, k);
      group_strips(x, scratch.data(), k, n, bias, y, ic, ie, jg, cols);
    }
  }
}

template <DType T>
void matmul_typed(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                  const float* bias, float* y) {
  using Elem = typename ElemOf<T>::type;
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
      if constexpr (T == DType::kQ4_0 || T == DType::kQ4_1 || T == DType::kQ8_0) {
        if (i1 - i0 <= 4) {
          matmul_block32_small<T>(x, wp, k, n, bias, y, i0, i1, j0, j1);
        } else {
          matmul_block_quant(T, x, wp, k, n, bias, y, i0, i1, j0, j1);
        }
      } else if constexpr (dtype_is_block(T)) {
        matmul_block_quant(T, x, wp, k, n, bias, y, i0, i1, j0, j1);
      } else {
        matmul_block<T>(x, wp, k, n, bias, y, i0, i1, j0, j1);
      }
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
  check(w.cols % dtype_block_elems(w.dtype) == 0,
        "matmul: {} weight rows of {} columns are not whole blocks of {}", dtype_name(w.dtype),
        w.cols, dtype_block_elems(w.dtype));
  switch (w.dtype) {
    case DType::kF32:
      return matmul_typed<DType::kF32>(pool, x, m, w, bias, y);
    case DType::kBF16:
      return matmul_typed<DType::kBF16>(pool, x, m, w, bias, y);
    case DType::kF16:
      return matmul_typed<DType::kF16>(pool, x, m, w, bias, y);
    case DType::kQ4_0:
      return matmul_typed<DType::kQ4_0>(pool, x, m, w, bias, y);
    case DType::kQ4_1:
      return matmul_typed<DType::kQ4_1>(pool, x, m, w, bias, y);
    case DType::kQ8_0:
      return matmul_typed<DType::kQ8_0>(pool, x, m, w, bias, y);
    case DType::kQ4_K:
      return matmul_typed<DType::kQ4_K>(pool, x, m, w, bias, y);
    case DType::kQ6_K:
      return matmul_typed<DType::kQ6_K>(pool, x, m, w, bias, y);
    case DType::kQ5_0:
      return matmul_typed<DType::kQ5_0>(pool, x, m, w, bias, y);
    case DType::kQ5_1:
      return matmul_typed<DType::kQ5_1>(pool, x, m, w, bias, y);
    case DType::kIQ4_NL:
      return matmul_typed<DType::kIQ4_NL>(pool, x, m, w, bias, y);
    case DType::kQ2_K:
      return matmul_typed<DType::kQ2_K>(pool, x, m, w, bias, y);
    case DType::kQ3_K:
      return matmul_typed<DType::kQ3_K>(pool, x, m, w, bias, y);
    case DType::kQ5_K:
      return matmul_typed<DType::kQ5_K>(pool, x, m, w, bias, y);
    case DType::kIQ4_XS:
      return matmul_typed<DType::kIQ4_XS>(pool, x, m, w, bias, y);
    case DType::kF8E4M3:
    case DType::kF8E4M3B128:
    case DType::kF8E4M3G128:
      break;  // its own arithmetic: matmul_fp8.h
  }
  throw_error("matmul: unsupported weight dtype {}", static_cast<int>(w.dtype));
}

}  // namespace detllm::kernels::cpu
