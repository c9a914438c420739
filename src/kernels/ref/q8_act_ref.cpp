// The q8-activation matmul's definition as scalar loops (q8_act_ref.h). Built with
// -ffp-contract=off: every fma below is std::fma, every other operation rounds on its own.
#include "kernels/ref/q8_act_ref.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/quant.h"

namespace detllm::kernels::ref {
namespace {

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  float f;
  dequantize_row(DType::kF16, reinterpret_cast<const uint8_t*>(&h), &f, 1);
  return f;
}

// Quant value e (0..31) of block b of a weight row, and the block's scale and min.
struct WeightBlock {
  int32_t q[kQ8Block];
  float d = 0, m = 0;
};

WeightBlock weight_block(DType t, const uint8_t* row, int64_t b) {
  WeightBlock w;
  const uint8_t* p = row + b * dtype_block_bytes(t);
  w.d = f16_at(p);
  switch (t) {
    case DType::kQ8_0:
      for (int e = 0; e < 32; ++e) w.q[e] = static_cast<int8_t>(p[2 + e]);
      break;
    case DType::kQ4_0:
      for (int e = 0; e < 16; ++e) {
        w.q[e] = (p[2 + e] & 0x0F) - 8;
        w.q[e + 16] = (p[2 + e] >> 4) - 8;
      }
      break;
    case DType::kQ4_1:
      w.m = f16_at(p + 2);
      for (int e = 0; e < 16; ++e) {
        w.q[e] = p[4 + e] & 0x0F;
        w.q[e + 16] = p[4 + e] >> 4;
      }
      break;
    default:
      throw_error("q8 activations: no kernel for {} weights", dtype_name(t));
  }
  return w;
}

}  // namespace

bool q8_act_weight_dtype(DType t) {
  return t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ8_0;
}

void quantize_row_q8_act(const float* x, int64_t k, int8_t* q, float* d, float* s, int32_t* sum) {
  check(k % kQ8Block == 0, "q8 activations: a row of {} is not whole blocks of 32", k);
  for (int64_t b = 0; b < k / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    int8_t* qb = q + b * kQ8Block;
    bool finite = true;
    float amax = 0.0f;
    for (int e = 0; e < kQ8Block; ++e) {
      const float a = std::fabs(xb[e]);
      if (!(a <= FLT_MAX)) finite = false;
      if (a > amax) amax = a;
    }
    float db = amax / 127.0f;
    int32_t total = 0;
    if (!finite || db < FLT_MIN) {
      db = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      for (int e = 0; e < kQ8Block; ++e) qb[e] = 0;
    } else {
      const float id = 1.0f / db;
      for (int e = 0; e < kQ8Block; ++e) {
        const float v = xb[e] * id;
        qb[e] = static_cast<int8_t>(std::nearbyint(v));  // round half to even (default mode)
        total += qb[e];
      }
    }
    d[b] = db;
    sum[b] = total;
    s[b] = db * static_cast<float>(total);
  }
}

void matmul_q8_act(const float* x, int32_t m, const WeightMatrix& w, const float* bias, float* y) {
  check(q8_act_weight_dtype(w.dtype), "q8 activations: no kernel for {} weights",
        dtype_name(w.dtype));
  const int64_t k = w.cols, nb = k / kQ8Block;
  std::vector<int8_t> q(static_cast<size_t>(k));
  std::vector<float> d(nb), s(nb);
  std::vector<int32_t> sum(nb);
  const int64_t row_bytes = dtype_row_bytes(w.dtype, k);
  for (int32_t i = 0; i < m; ++i) {
    quantize_row_q8_act(x + static_cast<int64_t>(i) * k, k, q.data(), d.data(), s.data(),
                        sum.data());
    for (int64_t j = 0; j < w.rows; ++j) {
      const uint8_t* row = static_cast<const uint8_t*>(w.data) + j * row_bytes;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const WeightBlock wb = weight_block(w.dtype, row, b);
        int32_t dot = 0;
        for (int e = 0; e < kQ8Block; ++e) dot += wb.q[e] * q[b * kQ8Block + e];
        acc = std::fma(wb.d * d[b], static_cast<float>(dot), acc);
        if (w.dtype == DType::kQ4_1) acc = std::fma(wb.m, s[b], acc);
      }
      y[static_cast<int64_t>(i) * w.rows + j] = bias != nullptr ? acc + bias[j] : acc;
    }
  }
}

}  // namespace detllm::kernels::ref
