// The reference backend: the semantics of every op in ops.h as obvious scalar loops on one
// thread (sequential fp32 sums, two-pass softmax, libm exp/cos/sin; sampling through the
// reference sampler, ref_sampler.h). Slow on purpose; other backends are tested against it. Test: build/tests/test_kernels --gtest_filter='*BackendOps*'
// (tests/kernels/backend_ops_test.cpp: every backend's ops against these).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "kernels/ops.h"
#include "kernels/ref/moe_ref.h"
#include "kernels/ref/fp8_linear.h"
#include "kernels/ref/ref_sampler.h"

namespace detllm::kernels {
namespace {

// Row r of a weight matrix in fp32: widened exactly, or its blocks decoded by core/quant.h
// (the scalar definition of every block type).
std::vector<float> weight_row(const WeightMatrix& w, int64_t r) {
  check(w.cols % dtype_block_elems(w.dtype) == 0, "ref: {} row of {} columns is not whole blocks",
        dtype_name(w.dtype), w.cols);
  std::vector<float> row(static_cast<size_t>(w.cols));
  const int64_t row_bytes = dtype_row_bytes(w.dtype, w.cols);
  dequantize_row(w.dtype, static_cast<const uint8_t*>(w.data) + r * row_bytes, row.data(), w.cols);
  return row;
}

// Slot of position p of sequence s (ops.h StepBatch diagram), range-checked.
int64_t slot_of(const StepBatch& batch, const KvCacheLayer& cache, int32_t s, int32_t p) {
  const int32_t j = p / cache.block_size;
  check(j < batch.max_blocks, "ref: position {} needs block {} >= max_blocks {}", p, j,
        batch.max_blocks);
  const int32_t block = batch.block_tables[static_cast<int64_t>(s) * batch.max_blocks + j];
  check(block >= 0 && block < cache.n_blocks, "ref: block {} outside the cache's {} blocks", block,
        cache.n_blocks);
  return static_cast<int64_t>(block) * cache.block_size + p % cache.block_size;
}

class RefOps final : public Ops {
 public:
  explicit RefOps(bool kv_fp8) : kv_fp8_(kv_fp8) {}
  std::string_view name() const override { return "ref"; }
  bool kv_fp8() const override { return kv_fp8_; }
  bool reads_weight_dtype(DType) const override { return true; }

  void embedding(const WeightMatrix& table, const int32_t* ids, int32_t n, float* out) override {
    for (int32_t i = 0; i < n; ++i) {
      check(ids[i] >= 0 && ids[i] < table.rows, "ref embedding: token id {} outside 0..{}", ids[i],
            table.rows - 1);
      const std::vector<float> row = weight_row(table, ids[i]);
      for (int64_t d = 0; d < table.cols; ++d) out[i * table.cols + d] = row[d];
    }
  }

  void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
               float* out) override {
    for (int32_t i = 0; i < n; ++i) {
      const float* xr = x + static_cast<int64_t>(i) * dim;
      float ss = 0.0f;
      for (int32_t d = 0; d < dim; ++d) ss += xr[d] * xr[d];
      const float r = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
      float* o = out + static_cast<int64_t>(i) * dim;
      for (int32_t d = 0; d < dim; ++d) o[d] = xr[d] * r * w[d];
    }
  }

  // numerics: one kernel serves both (invariant by construction).
  void matmul(const float* x, int32_t m, const WeightMatrix& w, const float* bias, float* y,
              NumericsMode /*numerics*/) override {
    if (dtype_is_fp8(w.dtype)) return ref::fp8_linear(x, m, w, bias, y);  // its own arithmetic
    for (int64_t j = 0; j < w.rows; ++j) {
      const std::vector<float> wj = weight_row(w, j);
      for (int32_t i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int64_t k = 0; k < w.cols; ++k) acc += x[i * w.cols + k] * wj[k];
        if (bias != nullptr) acc += bias[j];
        y[i * w.rows + j] = acc;
      }
    }
  }

  void rope(float* x, int32_t n, int32_t n_heads, int32_t head_dim, const int32_t* positions,
            const RopeTable& table) override {
    const int32_t half = table.rot_dim / 2;
    check(table.rot_dim <= head_dim && static_cast<int64_t>(table.inv_freq.size()) == half,
          "ref rope: bad table (rot_dim {}, head_dim {})", table.rot_dim, head_dim);
    for (int32_t t = 0; t < n; ++t) {
      for (int32_t h = 0; h < n_heads; ++h) {
        float* xh = x + (static_cast<int64_t>(t) * n_heads + h) * head_dim;
        for (int32_t i = 0; i < half; ++i) {
          const float angle = static_cast<float>(positions[t]) * table.inv_freq[i];
          const float c = std::cos(angle);
          const float s = std::sin(angle);
          const float a = xh[i];
          const float b = xh[i + half];
          xh[i] = a * c - b * s;
          xh[i + half] = b * c + a * s;
        }
      }
    }
  }

  void kv_append(const float* k, const float* v, const StepBatch& batch,
                 const KvCacheLayer& cache) override {
    const int64_t row = static_cast<int64_t>(cache.n_kv_heads) * cache.head_dim;
    const int64_t n_slots = static_cast<int64_t>(cache.n_blocks) * cache.block_size;
    float* ck = cache.k_f32();
    float* cv = cache.v_f32();
    for (int32_t t = 0; t < batch.n_tokens; ++t) {
      const int64_t slot = batch.slots[t];
      check(slot >= 0 && slot < n_slots, "ref kv_append: slot {} outside 0..{}", slot, n_slots - 1);
      for (int64_t e = 0; e < row; ++e) {
        if (cache.k_scale != nullptr) {
          ck[slot * row + e] = ref::fp8_kv_round(k[t * row + e], cache.k_scale[e / cache.head_dim]);
          cv[slot * row + e] = ref::fp8_kv_round(v[t * row + e], cache.v_scale[e / cache.head_dim]);
          continue;
        }
        ck[slot * row + e] = k[t * row + e];
        cv[slot * row + e] = v[t * row + e];
      }
    }
  }

  void attention(const float* q, const KvCacheLayer& cache, const StepBatch& batch, int32_t n_heads,
                 float scale, float* out) override {
    check(n_heads > 0 && cache.n_kv_heads > 0 && n_heads % cache.n_kv_heads == 0,
          "ref attention: n_heads {} not a multiple of n_kv_heads {}", n_heads, cache.n_kv_heads);
    const int32_t hd = cache.head_dim;
    const int32_t n_rep = n_heads / cache.n_kv_heads;
    const int64_t slot_stride = static_cast<int64_t>(cache.n_kv_heads) * hd;
    std::vector<float> scores;
    for (int32_t t = 0; t < batch.n_tokens; ++t) {
      const int32_t s = batch.seq_of_token[t];
      const int32_t pos = batch.positions[t];
      check(s >= 0 && s < batch.n_seqs && pos >= 0, "ref attention: bad token {} metadata", t);
      for (int32_t h = 0; h < n_heads; ++h) {
        const int32_t kvh = h / n_rep;
        const float* qh = q + (static_cast<int64_t>(t) * n_heads + h) * hd;
        scores.assign(pos + 1, 0.0f);
        float max_score = -INFINITY;
        for (int32_t p = 0; p <= pos; ++p) {
          const float* kr = cache.k_f32() + slot_of(batch, cache, s, p) * slot_stride + kvh * hd;
          float dot = 0.0f;
          for (int32_t d = 0; d < hd; ++d) dot += qh[d] * kr[d];
          scores[p] = dot * scale;
          max_score = std::max(max_score, scores[p]);
        }
        float sum = 0.0f;
        for (int32_t p = 0; p <= pos; ++p) {
          scores[p] = std::exp(scores[p] - max_score);
          sum += scores[p];
        }
        float* oh = out + (static_cast<int64_t>(t) * n_heads + h) * hd;
        for (int32_t d = 0; d < hd; ++d) oh[d] = 0.0f;
        for (int32_t p = 0; p <= pos; ++p) {
          const float* vr = cache.v_f32() + slot_of(batch, cache, s, p) * slot_stride + kvh * hd;
          for (int32_t d = 0; d < hd; ++d) oh[d] += scores[p] * vr[d];
        }
        for (int32_t d = 0; d < hd; ++d) oh[d] /= sum;
      }
    }
  }

  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }

  void add(float* x, const float* y, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  }

  void sample_rows(const float* logits, int32_t rows, int32_t vocab, const SampleRowParams* params,
                   SampleRowResult* out) override {
    check(rows >= 0 && vocab > 0, "ref sample_rows: bad shape ({} rows, vocab {})", rows, vocab);
    for (int32_t r = 0; r < rows; ++r) {
      const std::span<const float> row(logits + static_cast<int64_t>(r) * vocab,
                                       static_cast<size_t>(vocab));
      out[r] = sample_row_reference(row, params[r]);
    }
  }

  void sample_rows_masked(const float* logits, int32_t rows, int32_t vocab,
                          const SampleRowParams* params, RowMasks masks,
                          SampleRowResult* out) override {
    check(rows >= 0 && vocab > 0, "ref sample_rows: bad shape ({} rows, vocab {})", rows, vocab);
    const size_t n_words = (static_cast<size_t>(vocab) + 31) / 32;
    for (int32_t r = 0; r < rows; ++r) {
      const std::span<const float> row(logits + static_cast<int64_t>(r) * vocab,
                                       static_cast<size_t>(vocab));
      out[r] = masks.begin[r] < 0
                   ? sample_row_reference(row, params[r])
                   : sample_row_masked_reference(
                         row, params[r],
                         std::span<const uint32_t>(masks.words + masks.begin[r], n_words));
    }
  }

  void moe_route(const float* logits, int32_t n, int32_t n_experts, int32_t k, bool renormalize,
                 int32_t* experts, float* weights) override {
    ref::moe_route(logits, n, n_experts, k, renormalize, experts, weights);
  }
  void moe_combine(const float* y, const int32_t* rows, const float* weights, int32_t n, int32_t k,
                   int32_t dim, const float* shared, const float* shared_gate,
                   float* out) override {
    ref::moe_combine(y, rows, weights, n, k, dim, shared, shared_gate, out);
  }

 private:
  bool kv_fp8_;
};

}  // namespace

std::unique_ptr<Ops> make_ref_ops(bool kv_fp8) {
  return std::make_unique<RefOps>(kv_fp8);
}

}  // namespace detllm::kernels
