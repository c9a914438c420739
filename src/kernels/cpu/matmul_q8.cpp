// The q8-activation matmul with AVX2 (matmul_q8.h; the definition: kernels/ref/q8_act_ref.h).
// A tile is R rows × 8 output columns; per weight block the 8 columns' quants are unpacked
// once and used by the R rows: maddubs + madd give 8 int32 partial sums per (row, column),
// which are reduced to one exact int32 per column (lanes = columns), converted (exact: below
// 2^24) and folded into the row's 8-lane accumulator with the reference's fmas. Integer sums
// have no order, and each lane's fp32 sequence is the reference's, so tiles, strips and the
// thread partition move speed only.
#include "kernels/cpu/matmul_q8.h"

#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/simd.h"
#include "kernels/ref/q8_act_ref.h"

namespace detllm::kernels::cpu {
namespace {

constexpr int64_t kBlock = 32;
constexpr int kCols = 8;  // output columns per tile: the 8 lanes

inline uint16_t u16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// 8 f16 values, one per column (p[c] + off), widened exactly.
inline __m256 gather_f16(const uint8_t* const p[kCols], int64_t off) {
  const __m128i h = _mm_setr_epi16(
      static_cast<int16_t>(u16_at(p[0] + off)), static_cast<int16_t>(u16_at(p[1] + off)),
      static_cast<int16_t>(u16_at(p[2] + off)), static_cast<int16_t>(u16_at(p[3] + off)),
      static_cast<int16_t>(u16_at(p[4] + off)), static_cast<int16_t>(u16_at(p[5] + off)),
      static_cast<int16_t>(u16_at(p[6] + off)), static_cast<int16_t>(u16_at(p[7] + off)));
  return _mm256_cvtph_ps(h);
}

// A block's 32 quants in element order: nibbles (0..15, unsigned) for Q4_0/Q4_1 (Q4_0's -8 is
// applied to the sum), raw int8 for Q8_0.
template <DType T>
inline __m256i weight_quants(const uint8_t* block) {
  if constexpr (T == DType::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
  } else {
    const __m128i bytes =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + (T == DType::kQ4_1 ? 4 : 2)));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(bytes, mask);                     // elements 0..15
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);  // elements 16..31
    return _mm256_set_m128i(hi, lo);
  }
}

// 8 int32 partial sums of Σ_e w_e · x_e (exact; lane l holds elements 4l..4l+3).
template <DType T>
inline __m256i block_dot(__m256i w, __m256i xq) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (T == DType::kQ8_0) {
    // |w| (0..128) as unsigned times x carrying w's sign: |pair sums| <= 2·128·127 < 2^15.
    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(xq, w));
    return _mm256_madd_epi16(p, ones);
  } else {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, xq), ones);  // |pairs| <= 2·15·127
  }
}

// lane c = the sum of p[c]'s 8 lanes (exact integer sums, any order).
inline __m256i reduce8(const __m256i p[kCols]) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]);
  const __m256i h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]);
  const __m256i h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i a = _mm256_hadd_epi32(h01, h23);  // p0..p3 low-half sums | p0..p3 high-half
  const __m256i b = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

// Quantized activation rows (the layout the tiles read).
struct Q8Rows {
  const int8_t* q;     // (m, k)
  const float* d;      // (m, nb)
  const float* s;      // (m, nb)
  const int32_t* sum;  // (m, nb)
  int64_t k, nb;
};

// y[r, 0..cols) = acc[r] (+ bias) for R rows at stride ldy.
template <int R>
void store_rows(const __m256 acc[R], int cols, const float* bias, float* y, int64_t ldy) {
  for (int r = 0; r < R; ++r) {
    float* yr = y + r * ldy;
    if (cols == kCols) {
      __m256 v = acc[r];
      if (bias != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(bias));
      _mm256_storeu_ps(yr, v);
    } else {
      __m256 v = acc[r];
      if (bias != nullptr) v = _mm256_add_ps(v, load_tail(bias, cols));
      store_tail(yr, v, cols);
    }
  }
}

// acc + row i's block b against the 8 columns' quants wq (scales dw, mins mw): the integer dots
// summed exactly, then scaled in one fma (and the Q4_1 min term in a second). tile() and
// tile_unpacked() both run it, so they give the same bits.
template <DType T>
inline __m256 add_block(const Q8Rows& x, int64_t i, int64_t b, const __m256i (&wq)[kCols],
                        __m256 dw, __m256 mw, __m256 acc) {
  const __m256i xq =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + i * x.k + b * kBlock));
  __m256i p[kCols];
  for (int c = 0; c < kCols; ++c) p[c] = block_dot<T>(wq[c], xq);
  __m256i isum = reduce8(p);
  if constexpr (T == DType::kQ4_0) {  // Σ (n - 8) x = Σ n x - 8 Σ x, exactly
    isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(8 * x.sum[i * x.nb + b]));
  }
  const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(x.d[i * x.nb + b]));
  acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum), acc);
  if constexpr (T == DType::kQ4_1)
    acc = _mm256_fmadd_ps(mw, _mm256_set1_ps(x.s[i * x.nb + b]), acc);
  return acc;
}

// R rows from `row` × the `cols` (1..8) columns at w (rows of row_bytes): y[r, 0..cols).
// Meanwhile the pf_bytes at pf (a later tile's weights) are prefetched, spread over the blocks.
template <DType T, int R>
void tile(const Q8Rows& x, int64_t row, const uint8_t* w, int64_t row_bytes, int cols,
          const float* bias, float* y, int64_t ldy, const uint8_t* pf, int64_t pf_bytes) {
  constexpr int64_t bb = dtype_block_bytes(T);
  const uint8_t* col[kCols];
  for (int c = 0; c < kCols; ++c) col[c] = w + std::min(c, cols - 1) * row_bytes;
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const int64_t pf_step = (pf_bytes / 64 + x.nb - 1) / x.nb * 64;  // bytes per block
  for (int64_t b = 0; b < x.nb; ++b) {
    for (int64_t off = b * pf_step; off < std::min(pf_bytes, (b + 1) * pf_step); off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(pf + off), _MM_HINT_T0);
    __m256i wq[kCols];
    for (int c = 0; c < kCols; ++c) wq[c] = weight_quants<T>(col[c] + b * bb);
    const __m256 dw = gather_f16(col, b * bb);
    const __m256 mw = T == DType::kQ4_1 ? gather_f16(col, b * bb + 2) : _mm256_setzero_ps();
    for (int r = 0; r < R; ++r) acc[r] = add_block<T>(x, row + r, b, wq, dw, mw, acc[r]);
  }
  store_rows<R>(acc, cols, bias, y + row * ldy, ldy);
}

// A column tile's weights unpacked once for many rows: per block, the 8 columns' quants and
// their scales (and mins) as tile() computes them.
struct Unpacked {
  std::vector<uint8_t> wq;    // (nb, 8 columns, 32 quants)
  std::vector<float> dw, mw;  // (nb, 8 columns)
};

template <DType T>
void unpack_tile(const uint8_t* w, int64_t row_bytes, int cols, int64_t nb, Unpacked& u) {
  constexpr int64_t bb = dtype_block_bytes(T);
  const uint8_t* col[kCols];
  for (int c = 0; c < kCols; ++c) col[c] = w + std::min(c, cols - 1) * row_bytes;
  u.wq.resize(static_cast<size_t>(nb) * kCols * kBlock);
  u.dw.resize(static_cast<size_t>(nb) * kCols);
  u.mw.resize(u.dw.size());
  for (int64_t b = 0; b < nb; ++b) {
    for (int c = 0; c < kCols; ++c) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u.wq.data() + (b * kCols + c) * kBlock),
                          weight_quants<T>(col[c] + b * bb));
    }
    _mm256_storeu_ps(u.dw.data() + b * kCols, gather_f16(col, b * bb));
    _mm256_storeu_ps(u.mw.data() + b * kCols,
                     T == DType::kQ4_1 ? gather_f16(col, b * bb + 2) : _mm256_setzero_ps());
  }
}

// tile() on an unpacked column tile: the same per-lane operations, so the same bits.
template <DType T, int R>
void tile_unpacked(const Q8Rows& x, int64_t row, const Unpacked& u, int cols, const float* bias,
                   float* y, int64_t ldy) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < x.nb; ++b) {
    const uint8_t* wb = u.wq.data() + b * kCols * kBlock;
    const __m256 dw = _mm256_loadu_ps(u.dw.data() + b * kCols);
    const __m256 mw = _mm256_loadu_ps(u.mw.data() + b * kCols);
    __m256i wq[kCols];
    for (int c = 0; c < kCols; ++c)
      wq[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + c * kBlock));
    for (int r = 0; r < R; ++r) acc[r] = add_block<T>(x, row + r, b, wq, dw, mw, acc[r]);
  }
  store_rows<R>(acc, cols, bias, y + row * ldy, ldy);
}

// Rows [i0, i1) × columns [j0, j1): row chunks whose quantized x stays in L2, column tiles
// of 8 over each chunk (the tile's weights stay in L1 while the chunk's rows pass), strips of
// up to 4 rows.
template <DType T>
void matmul_part(const Q8Rows& x, const uint8_t* w, int64_t n, const float* bias, float* y,
                 int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const int64_t row_bytes = dtype_row_bytes(T, x.k);
  const int64_t chunk = std::max<int64_t>(4, (256 * 1024) / std::max<int64_t>(1, x.k));
  for (int64_t ic = i0; ic < i1; ic += chunk) {
    const int64_t ie = std::min(i1, ic + chunk);
    for (int64_t j = j0; j < j1; j += kCols) {
      const int cols = static_cast<int>(std::min<int64_t>(kCols, j1 - j));
      const uint8_t* wj = w + j * row_bytes;
      const float* bj = bias != nullptr ? bias + j : nullptr;
      float* yj = y + j;
      // The first strip over a tile streams it from memory: it prefetches the tile
      // kPfTiles on; later strips find their tile in L1.
      constexpr int64_t kPfTiles = 2;
      const int64_t pf_j = std::min(j1, j + kPfTiles * kCols);
      const uint8_t* pf = w + pf_j * row_bytes;
      const int64_t pf_bytes = (std::min(j1, pf_j + kCols) - pf_j) * row_bytes;
      if (ie - ic > 4) {  // many rows: unpack the tile once for all of them
        thread_local Unpacked u;
        unpack_tile<T>(wj, row_bytes, cols, x.nb, u);
        int64_t i = ic;
        for (; i + 4 <= ie; i += 4) tile_unpacked<T, 4>(x, i, u, cols, bj, yj, n);
        switch (ie - i) {
          case 3:
            tile_unpacked<T, 3>(x, i, u, cols, bj, yj, n);
            break;
          case 2:
            tile_unpacked<T, 2>(x, i, u, cols, bj, yj, n);
            break;
          case 1:
            tile_unpacked<T, 1>(x, i, u, cols, bj, yj, n);
            break;
          default:
            break;
        }
        continue;
      }
      int64_t i = ic;
      for (; i + 4 <= ie; i += 4) {
        tile<T, 4>(x, i, wj, row_bytes, cols, bj, yj, n, pf, i == ic ? pf_bytes : 0);
      }
      const int64_t pf_rest = i == ic ? pf_bytes : 0;
      switch (ie - i) {
        case 3:
          tile<T, 3>(x, i, wj, row_bytes, cols, bj, yj, n, pf, pf_rest);
          break;
        case 2:
          tile<T, 2>(x, i, wj, row_bytes, cols, bj, yj, n, pf, pf_rest);
          break;
        case 1:
          tile<T, 1>(x, i, wj, row_bytes, cols, bj, yj, n, pf, pf_rest);
          break;
        default:
          break;
      }
    }
  }
}

template <DType T>
void matmul_typed(ThreadPool& pool, const Q8Rows& x, int64_t m, const WeightMatrix& w,
                  const float* bias, float* y) {
  const uint8_t* wp = static_cast<const uint8_t*>(w.data);
  const int64_t n = w.rows;
  // Threads take ranges of 8-column units (rows only when there are fewer units than
  // threads); any partition gives the same bits.
  const int64_t n_threads = pool.n_threads();
  const int64_t col_units = (n + kCols - 1) / kCols;
  const int64_t row_units = (m + 3) / 4;
  const int64_t parts_n = std::min(n_threads, col_units);
  const int64_t parts_m = std::min((n_threads + parts_n - 1) / parts_n, row_units);
  pool.parallel_for(parts_m * parts_n, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t pm = item / parts_n, pn = item % parts_n;
      const int64_t i0 = std::min(m, row_units * pm / parts_m * 4);
      const int64_t i1 = std::min(m, row_units * (pm + 1) / parts_m * 4);
      const int64_t j0 = std::min(n, col_units * pn / parts_n * kCols);
      const int64_t j1 = std::min(n, col_units * (pn + 1) / parts_n * kCols);
      if (i1 > i0 && j1 > j0) matmul_part<T>(x, wp, n, bias, y, i0, i1, j0, j1);
    }
  });
}

}  // namespace

void quantize_row_q8_act(const float* x, int64_t k, int8_t* q, float* d, float* s, int32_t* sum) {
  check(k % kBlock == 0, "q8 activations: a row of {} is not whole blocks of 32", k);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 fmax = _mm256_set1_ps(FLT_MAX);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    __m256 v[4], amax = _mm256_setzero_ps();
    int nonfinite = 0;
    for (int g = 0; g < 4; ++g) {
      v[g] = _mm256_loadu_ps(xb + 8 * g);
      const __m256 a = _mm256_andnot_ps(sign, v[g]);
      nonfinite |= _mm256_movemask_ps(_mm256_cmp_ps(a, fmax, _CMP_NLE_UQ));
      amax = _mm256_max_ps(amax, a);  // finite lanes: exact in any order
    }
    float db = hmax8(amax) / 127.0f;
    int8_t* qb = q + b * kBlock;
    int32_t total = 0;
    if (nonfinite != 0 || db < FLT_MIN) {
      db = nonfinite != 0 ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      std::memset(qb, 0, kBlock);
    } else {
      const __m256 id = _mm256_set1_ps(1.0f / db);
      __m256i qi[4];  // round half to even (MXCSR default), |q| <= 127
      for (int g = 0; g < 4; ++g) qi[g] = _mm256_cvtps_epi32(_mm256_mul_ps(v[g], id));
      const __m256i s01 = _mm256_packs_epi32(qi[0], qi[1]);  // 0-3 8-11 | 4-7 12-15 (i16)
      const __m256i s23 = _mm256_packs_epi32(qi[2], qi[3]);
      const __m256i b8 = _mm256_packs_epi16(s01, s23);  // 0-3 8-11 16-19 24-27 | 4-7 ...
      const __m256i ordered =
          _mm256_permutevar8x32_epi32(b8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), ordered);
      const __m256i t =
          _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
      alignas(32) int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), t);
      for (int l = 0; l < 8; ++l) total += lanes[l];
    }
    d[b] = db;
    sum[b] = total;
    s[b] = db * static_cast<float>(total);
  }
}

void matmul_q8(ThreadPool& pool, const float* x, int32_t m, const WeightMatrix& w,
               const float* bias, float* y) {
  check(m >= 0 && w.rows >= 0 && w.cols >= 0, "matmul_q8: negative shape (m {}, w {}x{})", m,
        w.rows, w.cols);
  check(ref::q8_act_weight_dtype(w.dtype), "matmul_q8: no q8-activation kernel for {} weights",
        dtype_name(w.dtype));
  check(w.cols % kBlock == 0, "matmul_q8: rows of {} columns are not whole blocks of 32", w.cols);
  if (m == 0 || w.rows == 0) return;
  check(w.data != nullptr && x != nullptr && y != nullptr, "matmul_q8: null pointer");
  const int64_t k = w.cols, nb = k / kBlock;
  // The caller's scratch (part 0 of every parallel_for runs on the calling thread).
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, s;
  thread_local std::vector<int32_t> sum;
  q.resize(static_cast<size_t>(m) * k);
  d.resize(static_cast<size_t>(m) * nb);
  s.resize(d.size());
  sum.resize(d.size());
  int8_t* qp = q.data();
  float *dp = d.data(), *sp = s.data();
  int32_t* sump = sum.data();
  pool.parallel_for(
      m,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          quantize_row_q8_act(x + i * k, k, qp + i * k, dp + i * nb, sp + i * nb, sump + i * nb);
      },
      16);
  const Q8Rows rows{qp, dp, sp, sump, k, nb};
  switch (w.dtype) {
    case DType::kQ4_0:
      return matmul_typed<DType::kQ4_0>(pool, rows, m, w, bias, y);
    case DType::kQ4_1:
      return matmul_typed<DType::kQ4_1>(pool, rows, m, w, bias, y);
    case DType::kQ8_0:
      return matmul_typed<DType::kQ8_0>(pool, rows, m, w, bias, y);
    default:
      break;
  }
  throw_error("matmul_q8: no q8-activation kernel for {} weights", dtype_name(w.dtype));
}

}  // namespace detllm::kernels::cpu
