// CPU causal attention, one fixed operation sequence per (token, head) row, for any batch:
//   positions 0 … pos in tiles [32T, 32T+32) aligned to 0; per tile: scores s_j = dot(q, k_j)
//   (8-lane fma over head_dim in order, zero-padded tail, hsum8 tree) * scale; tile max;
//   p_j = exp8(s_j - m_new); tile sum = hsum8((P0 + P1) + (P2 + P3)) with absent groups 0;
//   from the second tile on, l = l*c + sum and o = o*c with c = exp(m_old - m_new);
//   o += p_j * v_j in ascending j; out = o / l. Positions past pos are never read.
// So prefill, decode and chunked prefill, any batch mix, page layout and n_threads give the
// same bits. Test: build/tests/test_kernels --gtest_filter='*Attention*'.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/simd.h"

namespace detllm::kernels::cpu {

void validate_step_batch(const StepBatch& batch, const KvCacheLayer& cache, bool check_history) {
  check(cache.block_size > 0 && cache.n_blocks >= 0 && cache.n_kv_heads > 0 && cache.head_dim > 0,
        "kv cache: bad geometry (blocks {}, block_size {}, kv heads {}, head_dim {})",
        cache.n_blocks, cache.block_size, cache.n_kv_heads, cache.head_dim);
  check(batch.n_tokens >= 0, "step batch: negative n_tokens {}", batch.n_tokens);
  if (batch.n_tokens == 0) return;
  check(cache.k != nullptr && cache.v != nullptr, "kv cache: null k or v");
  const int64_t n_slots = static_cast<int64_t>(cache.n_blocks) * cache.block_size;
  for (int32_t t = 0; t < batch.n_tokens; ++t) {
    if (!check_history) {
      check(batch.slots != nullptr, "step batch: null slots");
      check(batch.slots[t] >= 0 && batch.slots[t] < n_slots,
            "step batch: token {} has slot {} outside the cache's {} slots", t, batch.slots[t],
            n_slots);
      continue;
    }
    check(batch.positions != nullptr && batch.seq_of_token != nullptr &&
              batch.block_tables != nullptr,
          "step batch: null positions, seq_of_token or block_tables");
    const int32_t s = batch.seq_of_token[t];
    const int32_t pos = batch.positions[t];
    check(s >= 0 && s < batch.n_seqs, "step batch: token {} has sequence {} outside 0..{}", t, s,
          batch.n_seqs - 1);
    check(pos >= 0 && pos / cache.block_size < batch.max_blocks,
          "step batch: token {} position {} does not fit {} blocks of {}", t, pos, batch.max_blocks,
          cache.block_size);
    const int32_t* table = batch.block_tables + static_cast<int64_t>(s) * batch.max_blocks;
    for (int32_t b = 0; b <= pos / cache.block_size; ++b)
      check(table[b] >= 0 && table[b] < cache.n_blocks,
            "step batch: sequence {} block {} maps to {} outside 0..{}", s, b, table[b],
            cache.n_blocks - 1);
  }
}

namespace {

constexpr int kGroups = kAttentionTile / kLanes;  // 8-position groups per tile
static_assert(kAttentionTile % kLanes == 0);

// Per-part scratch: q heads of one kv group, zero-padded to whole 8-lane chunks.
struct RowState {
  int32_t head_dim = 0;
  int32_t dim_pad = 0;       // head_dim rounded up to 8
  std::vector<float> q;      // (n_rep, dim_pad) zero-padded
  std::vector<float> o;      // (n_rep, dim_pad) running output
  std::vector<float> m, l;   // (n_rep) running max, running sum
  std::vector<float> zeros;  // (dim_pad) stands in for K rows past pos inside a group of 8
};

// 8 scores of one group: lane jj = dot(q, k_rows[jj]) * scale, fixed order.
inline __m256 score_group(const float* q, const float* const* k_rows, int32_t head_dim,
                          __m256 scale) {
  __m256 acc[kLanes];
  for (int jj = 0; jj < kLanes; ++jj) acc[jj] = _mm256_setzero_ps();
  int32_t d = 0;
  for (; d + kLanes <= head_dim; d += kLanes) {
    const __m256 qv = load8(q + d);
    for (int jj = 0; jj < kLanes; ++jj)
      acc[jj] = _mm256_fmadd_ps(qv, load8(k_rows[jj] + d), acc[jj]);
  }
  if (d < head_dim) {
    const __m256 qv = load8(q + d);  // q is zero-padded
    for (int jj = 0; jj < kLanes; ++jj)
      acc[jj] = _mm256_fmadd_ps(qv, load_tail(k_rows[jj] + d, head_dim - d), acc[jj]);
  }
  return _mm256_mul_ps(hsum8x8(acc), scale);
}

// o[d0 : d0 + 8*NC] = (first ? 0 : o * c) + Σ_j p[j] v_j[...] over j ascending; the last
// chunk reads only `tail` lanes of v when kTail. o is padded to whole chunks.
template <int NC, bool kTail>
inline void accumulate_v(const float* p, const float* const* v_rows, int32_t n_valid, int32_t d0,
                         int tail, bool first, float corr, float* o) {
  const __m256 cv = _mm256_set1_ps(corr);
  __m256 ov[NC];
  for (int c = 0; c < NC; ++c)
    ov[c] = first ? _mm256_setzero_ps() : _mm256_mul_ps(load8(o + d0 + c * kLanes), cv);
  for (int32_t j = 0; j < n_valid; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    const float* vr = v_rows[j] + d0;
    for (int c = 0; c < NC; ++c) {
      const __m256 vv =
          kTail && c == NC - 1 ? load_tail(vr + c * kLanes, tail) : load8(vr + c * kLanes);
      ov[c] = _mm256_fmadd_ps(pj, vv, ov[c]);
    }
  }
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(o + d0 + c * kLanes, ov[c]);
}

// accumulate_v for NC = 1…8 chunks, with and without a partial last chunk:
// kAccumulateV[(NC - 1) * 2 + kTail].
using AccumulateFn = void (*)(const float*, const float* const*, int32_t, int32_t, int, bool, float,
                              float*);
template <size_t... I>
constexpr std::array<AccumulateFn, sizeof...(I)> make_accumulate_table(std::index_sequence<I...>) {
  return {accumulate_v<static_cast<int>(I / 2) + 1, I % 2 == 1>...};
}
constexpr auto kAccumulateV = make_accumulate_table(std::make_index_sequence<2 * kLanes>());

// One tile [tile0, tile0 + n_valid) for one q head: updates m, l, o.
void tile_update(const float* q, const float* const* k_rows, const float* const* v_rows,
                 int32_t n_valid, bool first, int32_t head_dim, float scale, float& m, float& l,
                 float* o) {
  const int n_groups = (n_valid + kLanes - 1) / kLanes;
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 s[kGroups];
  __m256 smax = neg_inf;
  for (int g = 0; g < n_groups; ++g) {
    s[g] = score_group(q, k_rows + g * kLanes, head_dim, _mm256_set1_ps(scale));
    const int valid = std::min(kLanes, n_valid - g * kLanes);
    s[g] = _mm256_blendv_ps(neg_inf, s[g], _mm256_castsi256_ps(lane_mask(valid)));
    smax = _mm256_max_ps(smax, s[g]);
  }
  const float m_tile = hmax8(smax);
  const float m_new = first ? m_tile : std::max(m, m_tile);
  alignas(32) float p[kAttentionTile];
  __m256 pv[kGroups];
  for (int g = 0; g < kGroups; ++g) {
    // exp8(-inf) == 0 exactly, so lanes past pos contribute exact zeros.
    pv[g] = g < n_groups ? exp8(_mm256_sub_ps(s[g], _mm256_set1_ps(m_new))) : _mm256_setzero_ps();
    _mm256_store_ps(p + g * kLanes, pv[g]);
  }
  static_assert(kGroups == 4, "the tile-sum tree below is written for 4 groups");
  const float tile_sum =
      hsum8(_mm256_add_ps(_mm256_add_ps(pv[0], pv[1]), _mm256_add_ps(pv[2], pv[3])));
  const float corr = first ? 0.0f : exp1(m - m_new);
  l = first ? tile_sum : l * corr + tile_sum;
  m = m_new;
  // o = o*c, then o += p_j v_j over j ascending, in groups of up to 8 chunks (64 dims) so
  // the fma chains of different chunks interleave; each element's sequence is unchanged.
  const int32_t n_chunks = (head_dim + kLanes - 1) / kLanes;
  const int tail = head_dim % kLanes;  // lanes of the last chunk when partial, else 0
  for (int32_t c0 = 0; c0 < n_chunks; c0 += kLanes) {
    const int nc = std::min<int32_t>(kLanes, n_chunks - c0);
    const bool has_tail = tail != 0 && c0 + nc == n_chunks;
    kAccumulateV[(nc - 1) * 2 + (has_tail ? 1 : 0)](p, v_rows, n_valid, c0 * kLanes, tail, first,
                                                    corr, o);
  }
}

// All q heads of kv head kvh for token t.
void attend_row(const float* q, const KvCacheLayer& cache, const StepBatch& batch, int32_t t,
                int32_t kvh, int32_t n_heads, float scale, float* out, RowState& st) {
  const int32_t n_rep = n_heads / cache.n_kv_heads;
  const int32_t hd = cache.head_dim;
  const int32_t pos = batch.positions[t];
  const int32_t* table =
      batch.block_tables + static_cast<int64_t>(batch.seq_of_token[t]) * batch.max_blocks;
  const int64_t slot_stride = static_cast<int64_t>(cache.n_kv_heads) * hd;
  for (int32_t r = 0; r < n_rep; ++r) {
    const float* qh = q + (static_cast<int64_t>(t) * n_heads + kvh * n_rep + r) * hd;
    std::copy(qh, qh + hd, st.q.begin() + static_cast<int64_t>(r) * st.dim_pad);
  }
  const float* k_rows[kAttentionTile];
  const float* v_rows[kAttentionTile];
  for (int32_t tile0 = 0; tile0 <= pos; tile0 += kAttentionTile) {
    const int32_t n_valid = std::min(kAttentionTile, pos - tile0 + 1);
    int32_t block = tile0 / cache.block_size;  // walk (block, offset) of position tile0 + j
    int32_t offset = tile0 % cache.block_size;
    for (int32_t j = 0; j < kAttentionTile; ++j) {
      if (j >= n_valid) {
        k_rows[j] = v_rows[j] = st.zeros.data();
        continue;
      }
      const int64_t slot = static_cast<int64_t>(table[block]) * cache.block_size + offset;
      k_rows[j] = cache.k_f32() + slot * slot_stride + static_cast<int64_t>(kvh) * hd;
      v_rows[j] = cache.v_f32() + slot * slot_stride + static_cast<int64_t>(kvh) * hd;
      if (++offset == cache.block_size) {
        offset = 0;
        ++block;
      }
    }
    for (int32_t r = 0; r < n_rep; ++r)
      tile_update(st.q.data() + static_cast<int64_t>(r) * st.dim_pad, k_rows, v_rows, n_valid,
                  tile0 == 0, hd, scale, st.m[r], st.l[r],
                  st.o.data() + static_cast<int64_t>(r) * st.dim_pad);
  }
  for (int32_t r = 0; r < n_rep; ++r) {
    float* oh = out + (static_cast<int64_t>(t) * n_heads + kvh * n_rep + r) * hd;
    const float* acc = st.o.data() + static_cast<int64_t>(r) * st.dim_pad;
    for (int32_t d = 0; d < hd; ++d) oh[d] = acc[d] / st.l[r];
  }
}

}  // namespace

void attention(ThreadPool& pool, const float* q, const KvCacheLayer& cache, const StepBatch& batch,
               int32_t n_heads, float scale, float* out) {
  validate_step_batch(batch, cache, /*check_history=*/true);
  check(n_heads > 0 && n_heads % cache.n_kv_heads == 0,
        "attention: n_heads {} is not a multiple of n_kv_heads {}", n_heads, cache.n_kv_heads);
  if (batch.n_tokens == 0) return;
  check(q != nullptr && out != nullptr, "attention: null q or out");

  // Rows are (token, kv head); a part gets a contiguous range of about equal cost (pos + 1),
  // a static function of the batch. Which part computes a row never changes its bits.
  const int64_t n_rows = static_cast<int64_t>(batch.n_tokens) * cache.n_kv_heads;
  std::vector<int64_t> cost_prefix(n_rows + 1, 0);
  for (int64_t i = 0; i < n_rows; ++i)
    cost_prefix[i + 1] = cost_prefix[i] + batch.positions[i / cache.n_kv_heads] + 1;
  const int n_parts = static_cast<int>(std::min<int64_t>(pool.n_threads(), n_rows));
  std::vector<int64_t> bounds(n_parts + 1, n_rows);
  for (int p = 0; p < n_parts; ++p) {
    const int64_t target = cost_prefix[n_rows] * p / n_parts;
    bounds[p] =
        std::lower_bound(cost_prefix.begin(), cost_prefix.end(), target) - cost_prefix.begin();
  }

  const int32_t n_rep = n_heads / cache.n_kv_heads;
  pool.parallel_for(n_parts, [&](int64_t part_begin, int64_t part_end) {
    RowState st;
    st.head_dim = cache.head_dim;
    st.dim_pad = (cache.head_dim + kLanes - 1) / kLanes * kLanes;
    st.q.assign(static_cast<size_t>(n_rep) * st.dim_pad, 0.0f);
    st.o.assign(static_cast<size_t>(n_rep) * st.dim_pad, 0.0f);
    st.m.assign(n_rep, 0.0f);
    st.l.assign(n_rep, 0.0f);
    st.zeros.assign(st.dim_pad, 0.0f);
    for (int64_t p = part_begin; p < part_end; ++p)
      for (int64_t row = bounds[p]; row < bounds[p + 1]; ++row)
        attend_row(q, cache, batch, static_cast<int32_t>(row / cache.n_kv_heads),
                   static_cast<int32_t>(row % cache.n_kv_heads), n_heads, scale, out, st);
  });
}

}  // namespace detllm::kernels::cpu
