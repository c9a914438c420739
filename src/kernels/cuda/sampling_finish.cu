// The device sampler's last pass (the passes: sampling.cu): one block a row turns the plan, the
// bucket prefix sums and the candidate lists into the spec's result (kernels/sampling/sampler.h
// steps 1-5, logprob, top logprobs). Each boundary: its bucket from the prefix sums, then the
// radix select (sampling_select.cuh) inside the bucket, started from the exact sums before it,
// over the bucket's tokens in the list, or over the whole vocabulary when the list does not
// hold them. Test: tests/cuda/cuda_sampling_test.cpp.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/sampling_block.cuh"
#include "kernels/cuda/sampling_layout.cuh"
#include "kernels/cuda/sampling_select.cuh"
#include "kernels/sampling/sample_row.h"
#include "kernels/sampling/sampler_math.h"

namespace detllm::kernels::cuda::sampling {
namespace {

constexpr int kMaxTop = DrawParams::kMaxLogprobs;

struct FinishShared {
  SelectShared select;
  Reduce red;
  int found;
  int n_list;
  int list_token[kMaxTop];
  float list_logprob[kMaxTop];
};

// What the finish pass knows of its row.
struct Row {
  const float* x;
  int vocab;
  int id_bits;
  float max;
  uint32_t vkey_max;
  double temperature;
  double log_z1;
  RowHist hist;
  const RowPlan* plan;
  const Candidate* cands;
  unsigned int n_cands;  // > cand_capacity: the list overflowed (not usable)
  int cand_capacity;
  __device__ unsigned long long id_mask() const { return (1ull << id_bits) - 1; }
  // The list holds every token of bucket b.
  __device__ bool listed(int b) const {
    if (n_cands > static_cast<unsigned int>(cand_capacity)) return false;
    for (int k = 0; k < plan->n_intervals; ++k)
      if (plan->interval_lo[k] <= b && b <= plan->interval_hi[k]) return true;
    return false;
  }
};

// Sources of the radix select (sampling_select.cuh).
struct VocabInRange {  // the vocabulary's tokens whose rank key is in [lo, hi]
  const Row* row;
  unsigned long long lo, hi;
  __device__ int size() const { return row->vocab; }
  __device__ KeyOf key(int i) const {
    const unsigned long long k =
        sm::rank_key(row->x[i], static_cast<uint32_t>(i), row->id_bits);
    return KeyOf{lo <= k && k <= hi, k};
  }
  __device__ unsigned long long mass(int i) const {
    return sm::mass(row->x[i], row->max, row->temperature);
  }
};
struct ListInRange {  // the candidates whose rank key is in [lo, hi]
  const Candidate* cands;
  int n;
  unsigned long long lo, hi;
  __device__ int size() const { return n; }
  __device__ KeyOf key(int j) const {
    const unsigned long long k = cands[j].key;
    return KeyOf{lo <= k && k <= hi, k};
  }
  __device__ unsigned long long mass(int j) const { return cands[j].mass; }
};

// The end of the smallest rank prefix whose count (by_mass false) or mass at the row's
// temperature reaches the target. need_key false: only its count and mass are wanted.
__device__ Boundary rank_boundary(const Row& row, bool by_mass, unsigned int target_count,
                                  sm::U128 target_mass, bool need_key, FinishShared& s) {
  const int b = find_bucket(row.hist, by_mass, target_count, target_mass, s.found);
  if (b < 0) return Boundary{false, 0, 0, sm::U128{}};
  const unsigned int before_count = row.hist.count_through(b - 1);
  const sm::U128 before_mass = row.hist.mass_through(b - 1);
  const unsigned int bucket_count = row.hist.count_through(b) - before_count;
  const bool massless = row.hist.mass_through(b) == before_mass;
  if (!need_key && !by_mass && massless) {  // every token of the bucket has mass 0
    return Boundary{true, 0, target_count, before_mass};
  }
  const KeyRange keys = bucket_keys(b, row.vkey_max, row.id_bits);
  const int hi = sm::bit_length(keys.lo ^ keys.hi);  // the bucket's keys share the bits above
  const SearchStart start{keys.lo >> hi, hi, before_count, before_mass, bucket_count};
  if (row.listed(b)) {
    const ListInRange src{row.cands, static_cast<int>(row.n_cands), keys.lo, keys.hi};
    return search_prefix<true>(src, start, by_mass, target_count, target_mass, s.select);
  }
  const VocabInRange src{&row, keys.lo, keys.hi};
  return search_prefix<true>(src, start, by_mass, target_count, target_mass, s.select);
}

// ---- Top logprobs ----------------------------------------------------------------------------
// The n_top best by (logprob desc, id asc). From the list (every token with logprob >= a bound
// that the n_top-th is above): its n_top smallest keys (logprob's rank_value_key, then id).
// Else over the vocabulary: logprob is non-decreasing in the logit, so the list is every token
// with logprob > L* (L* = logprob of rank token n_top - 1) and the lowest ids of those == L*.

struct LpList {
  const unsigned int* ids;
  int n;
  const Row* row;
  __device__ int size() const { return n; }
  __device__ float logprob(int j) const {
    return sm::logprob_from_gap(row->x[ids[j]], row->max, row->log_z1);
  }
  __device__ KeyOf key(int j) const {
    return KeyOf{true, (static_cast<unsigned long long>(sm::rank_value_key(logprob(j)))
                        << row->id_bits) |
                           ids[j]};
  }
};
struct VocabByRank {
  const Row* row;
  __device__ int size() const { return row->vocab; }
  __device__ KeyOf key(int i) const {
    return KeyOf{true, sm::rank_key(row->x[i], static_cast<uint32_t>(i), row->id_bits)};
  }
};
struct VocabTied {  // ids of the tokens whose logprob is l_star
  const Row* row;
  float l_star;
  __device__ int size() const { return row->vocab; }
  __device__ KeyOf key(int i) const {
    return KeyOf{sm::logprob_from_gap(row->x[i], row->max, row->log_z1) == l_star,
                 static_cast<unsigned long long>(i)};
  }
};

__device__ inline void list_push(FinishShared& s, int token, float logprob) {
  const int slot = atomicAdd(&s.n_list, 1);
  if (slot < kMaxTop) {
    s.list_token[slot] = token;
    s.list_logprob[slot] = logprob;
  }
}

// Fills s.list with the n_top entries (any order); false when a selection broke.
__device__ bool top_logprobs(const Row& row, int n_top, const unsigned int* lp_ids,
                             unsigned int n_lp, int lp_capacity, FinishShared& s) {
  const int tid = threadIdx.x;
  if (tid == 0) s.n_list = 0;
  __syncthreads();
  if (row.plan->collect_lp != 0 && n_lp <= static_cast<unsigned int>(lp_capacity)) {
    const LpList src{lp_ids, static_cast<int>(n_lp), &row};
    const SearchStart start{0, 32 + row.id_bits, 0, sm::U128{}, n_lp};
    const Boundary last = search_prefix<false>(src, start, false,
                                               static_cast<unsigned int>(n_top), sm::U128{},
                                               s.select);
    for (int j = tid; j < src.n; j += kThreads) {
      if (last.ok && src.key(j).key <= last.key) list_push(s, static_cast<int>(lp_ids[j]),
                                                           src.logprob(j));
    }
    __syncthreads();
    return last.ok;
  }
  const SearchStart all{0, 32 + row.id_bits, 0, sm::U128{}, static_cast<unsigned int>(row.vocab)};
  const Boundary last = search_prefix<false>(VocabByRank{&row}, all, false,
                                             static_cast<unsigned int>(n_top), sm::U128{},
                                             s.select);
  const float l_star =
      sm::logprob_from_gap(row.x[last.key & row.id_mask()], row.max, row.log_z1);
  unsigned int above = 0;
  for (int i = tid; i < row.vocab; i += kThreads)
    above += sm::logprob_from_gap(row.x[i], row.max, row.log_z1) > l_star ? 1u : 0u;
  above = block_count(above, s.red);
  const SearchStart ids{0, row.id_bits, 0, sm::U128{}, static_cast<unsigned int>(row.vocab)};
  const Boundary tied = search_prefix<false>(VocabTied{&row, l_star}, ids, false,
                                             static_cast<unsigned int>(n_top) - above,
                                             sm::U128{}, s.select);
  for (int i = tid; i < row.vocab; i += kThreads) {
    const float lp = sm::logprob_from_gap(row.x[i], row.max, row.log_z1);
    if (lp > l_star || (lp == l_star && static_cast<unsigned long long>(i) <= tied.key))
      list_push(s, i, lp);
  }
  __syncthreads();
  return last.ok && tied.ok;
}

__global__ void __launch_bounds__(kThreads)
    finish_kernel(const float* __restrict__ logits, int vocab, int id_bits,
                  const SampleRowParams* __restrict__ params, Scratch sc,
                  SampleRowResult* results) {
  __shared__ FinishShared s;
  const int r = blockIdx.x, tid = threadIdx.x;
  const RowPlan* plan = sc.plans + r;
  SampleRowResult* out = results + r;
  if (plan->status != SampleRowStatus::kOk) {
    if (tid == 0) {
      out->status = plan->status;
      out->token = -1;
      out->n_top = 0;
    }
    return;
  }
  const SampleRowParams p = params[r];
  Row row;
  row.x = logits + static_cast<size_t>(r) * static_cast<size_t>(vocab);
  row.vocab = vocab;
  row.id_bits = id_bits;
  row.max = plan->max;
  row.vkey_max = sm::rank_value_key(plan->max);
  row.temperature = static_cast<double>(p.temperature);
  row.log_z1 = plan->log_z1;
  row.hist = row_hist(sc, r);
  row.plan = plan;
  row.cands = sc.cands + static_cast<size_t>(r) * sc.cand_capacity;
  row.n_cands = sc.counters[2 * r];
  row.cand_capacity = sc.cand_capacity;

  // Top logprobs.
  const int n_top = p.n_logprobs < vocab ? p.n_logprobs : vocab;
  if (n_top > 0) {
    const bool ok = top_logprobs(row, n_top, sc.lp_ids + static_cast<size_t>(r) * sc.lp_capacity,
                                 sc.counters[2 * r + 1], sc.lp_capacity, s);
    if (tid == 0) {
      const int n = s.n_list < kMaxTop ? s.n_list : kMaxTop;
      for (int a = 1; a < n; ++a) {  // insertion sort by (logprob desc, id asc)
        const int t = s.list_token[a];
        const float lp = s.list_logprob[a];
        int b = a;
        while (b > 0 && (s.list_logprob[b - 1] < lp ||
                         (s.list_logprob[b - 1] == lp && s.list_token[b - 1] > t))) {
          s.list_token[b] = s.list_token[b - 1];
          s.list_logprob[b] = s.list_logprob[b - 1];
          --b;
        }
        s.list_token[b] = t;
        s.list_logprob[b] = lp;
      }
      for (int j = 0; j < n; ++j) {
        out->top_tokens[j] = s.list_token[j];
        out->top_logprobs[j] = s.list_logprob[j];
      }
      // A count other than n_top means the selection broke: report it, never a wrong list.
      out->n_top = (ok && s.n_list == n_top) ? n_top : -1;
    }
  } else if (tid == 0) {
    out->n_top = 0;
  }

  // The token (spec steps 1-5 of sampler.h), or a scoring row's own (temperature 0).
  int token = p.score_token >= 0 ? p.score_token : plan->argmax;
  bool ok = true;
  if (p.temperature != 0.0f) {
    unsigned int n = static_cast<unsigned int>(vocab);
    sm::U128 kept = row.hist.mass_through(kBuckets - 1);
    if (p.top_k > 0 && p.top_k < vocab) {  // 1. top-k
      const Boundary k = rank_boundary(row, false, static_cast<unsigned int>(p.top_k),
                                       sm::U128{}, false, s);
      ok = ok && k.ok;
      n = static_cast<unsigned int>(p.top_k);
      kept = k.mass;
    }
    if (p.top_p < 1.0f) {  // 2. top-p
      const Boundary b =
          rank_boundary(row, true, 0, sm::top_p_threshold(kept, p.top_p), false, s);
      ok = ok && b.ok;
      n = b.count;
      kept = b.mass;
    }
    if (p.min_p > 0.0f && plan->n_min_p < n) {  // 3. min-p
      n = plan->n_min_p;
      kept = u128_of(plan->min_p_lo, plan->min_p_hi);
    }
    // 4-5. the draw: the first rank prefix whose mass exceeds t = floor(u53 * S / 2^53).
    const sm::U128 t = sm::draw_target(kept, sm::draw_bits53(p.seed, p.position, p.sample_index));
    const Boundary d = rank_boundary(row, true, 0, sm::add(t, 1ull), true, s);
    ok = ok && d.ok && d.count <= n;
    token = static_cast<int>(d.key & row.id_mask());
  }
  if (tid == 0) {
    out->token = ok ? token : -1;
    out->logprob = sm::logprob_from_gap(row.x[token], row.max, row.log_z1);
    out->status = SampleRowStatus::kOk;
  }
}

}  // namespace

cudaError_t launch_finish(const float* logits, int rows, int vocab, int id_bits,
                          const SampleRowParams* params, const Scratch& s, SampleRowResult* out,
                          cudaStream_t stream) {
  finish_kernel<<<rows, kThreads, 0, stream>>>(logits, vocab, id_bits, params, s, out);
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda::sampling
