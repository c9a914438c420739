// The canonical TP partition's pieces (see tensor_parallel.h).
#include "model/tensor_parallel.h"

#include <algorithm>
#include <string>
#include <thread>

#include "core/error.h"
#include "formats/dequant.h"

namespace detllm {
namespace {

// Rows [r0, r0 + n) of a (rows, cols) tensor, in its own dtype (a row is whole in every one).
HostTensor slice_rows(const HostTensor& t, int64_t r0, int64_t n) {
  const int64_t cols = t.shape.at(1);
  HostTensor s;
  s.shape = {n, cols};
  s.dtype = t.dtype;
  if (t.dtype == DType::kF32) {
    s.data.assign(t.data.begin() + r0 * cols, t.data.begin() + (r0 + n) * cols);
  } else {
    const int64_t rb = dtype_row_bytes(t.dtype, cols);
    s.raw.assign(t.raw.begin() + r0 * rb, t.raw.begin() + (r0 + n) * rb);
  }
  return s;
}

std::vector<float> slice(const std::vector<float>& v, int64_t i0, int64_t n) {
  if (v.empty()) return {};
  return {v.begin() + i0, v.begin() + i0 + n};
}

Linear slice_linear_rows(const Linear& l, int64_t r0, int64_t n) {
  return {slice_rows(l.w, r0, n), slice(l.bias, r0, n)};
}

}  // namespace

HostTensor tp_slice_cols(const HostTensor& t, int64_t c0, int64_t n) {
  const int64_t rows = t.shape.at(0), cols = t.shape.at(1);
  HostTensor s;
  s.shape = {rows, n};
  if (t.dtype == DType::kF32) {
    s.data.resize(static_cast<size_t>(rows * n));
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(t.data.begin() + r * cols + c0, n, s.data.begin() + r * n);
    return s;
  }
  // FP8 rows carry their scales and an arithmetic of their own (activations rounded per
  // row of x, whose columns a slice would cut): not sliced.
  check(!dtype_is_fp8(t.dtype), "tensor parallelism: FP8 weights ({}) are not implemented",
        dtype_name(t.dtype));
  const int64_t be = dtype_block_elems(t.dtype);
  if (c0 % be != 0 || n % be != 0) {  // not on block boundaries: the fp32 values
    HostTensor f32 = t;
    dequantize_tensor(f32);
    return tp_slice_cols(f32, c0, n);
  }
  s.dtype = t.dtype;
  const int64_t bb = dtype_block_bytes(t.dtype);
  const int64_t rb = cols / be * bb, off = c0 / be * bb, len = n / be * bb;
  s.raw.resize(static_cast<size_t>(rows * len));
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(t.raw.begin() + r * rb + off, len, s.raw.begin() + r * len);
  return s;
}

TpChunks tp_canonical_chunks(const ModelConfig& c) {
  TpChunks k;
  k.o = c.n_heads % 8 == 0 ? 8 : c.n_heads;
  k.ffn = 1;
  for (int32_t f : {8, 4, 2})
    if (c.ffn_dim % (f * 8) == 0) {
      k.ffn = f;
      break;
    }
  return k;
}

std::optional<TpPartition> tp_try_partition(const ModelConfig& c, int32_t degree,
                                            TpChunks chunks) {
  const int32_t t = degree, kv = c.n_kv_heads;
  if (t < 1 || chunks.o < 1 || chunks.ffn < 1 || kv < 1 || c.n_heads % kv != 0 ||
      c.n_heads % chunks.o != 0 || c.ffn_dim % chunks.ffn != 0 || t > chunks.o ||
      t > chunks.ffn)
    return std::nullopt;
  TpPartition p;
  p.chunks = chunks;
  p.degree = t;
  p.heads_per_o_chunk = c.n_heads / chunks.o;
  p.rows_per_ffn_chunk = c.ffn_dim / chunks.ffn;
  const int32_t group = c.n_heads / kv;  // q heads per KV head
  // q head boundaries of the ranks.
  std::vector<int32_t> heads(static_cast<size_t>(t) + 1, c.n_heads);
  if (t <= kv) {
    for (int32_t r = 0; r < t; ++r) heads[r] = r * kv / t * group;
  } else {
    if (group % p.heads_per_o_chunk != 0) return std::nullopt;  // a chunk spans two groups
    const int32_t units = group / p.heads_per_o_chunk;         // o chunks per group
    for (int32_t g = 0; g < kv; ++g) {
      const int32_t r0 = g * t / kv, n = (g + 1) * t / kv - r0;
      if (n > units) return std::nullopt;
      for (int32_t j = 0; j < n; ++j) heads[r0 + j] = g * group + j * units / n * p.heads_per_o_chunk;
    }
  }
  for (int32_t r = 0; r <= t; ++r) {
    if (heads[r] % p.heads_per_o_chunk != 0) return std::nullopt;
    p.o.push_back(heads[r] / p.heads_per_o_chunk);
    p.ffn.push_back(r * chunks.ffn / t);
  }
  for (int32_t r = 0; r < t; ++r) {
    const int32_t a = heads[r], b = heads[r + 1];
    if (b <= a || p.ffn[r + 1] <= p.ffn[r]) return std::nullopt;
    if (a % group == 0 && b % group == 0) {  // whole groups
      p.kv_first.push_back(a / group);
      p.n_kv.push_back((b - a) / group);
    } else if (a / group == (b - 1) / group) {  // part of one group
      p.kv_first.push_back(a / group);
      p.n_kv.push_back(1);
    } else {
      return std::nullopt;
    }
  }
  return p;
}

namespace {

std::vector<int32_t> allowed_degrees(const ModelConfig& c, TpChunks chunks) {
  std::vector<int32_t> out;
  for (int32_t d = 1; d <= std::min(chunks.o, chunks.ffn); ++d)
    if (tp_try_partition(c, d, chunks)) out.push_back(d);
  return out;
}

}  // namespace

TpPartition tp_partition(const ModelConfig& c, int32_t degree, TpChunks chunks) {
  check(!c.moe.active(),
        "tensor parallelism does not support mixture-of-experts models yet "
        "({}): run it without --tensor-parallel",
        model_arch_name(c.arch));
  std::optional<TpPartition> p = tp_try_partition(c, degree, chunks);
  if (!p) {
    std::string allowed;
    for (int32_t d : allowed_degrees(c, chunks))
      allowed += (allowed.empty() ? "" : ", ") + std::to_string(d);
    throw_error(
        "tensor-parallel degree {} does not split this model ({} q heads, {} KV heads, {} "
        "o_proj chunks, {} down_proj chunks: every rank needs at least one chunk of each, its q "
        "heads whole KV groups or part of one); it allows {}",
        degree, c.n_heads, c.n_kv_heads, chunks.o, chunks.ffn,
        allowed.empty() ? std::string("none") : allowed);
  }
  return *p;
}

TpPartition tp_partition(const ModelConfig& c, int32_t degree) {
  return tp_partition(c, degree, tp_canonical_chunks(c));
}

std::vector<int32_t> tp_allowed_degrees(const ModelConfig& c) {
  return allowed_degrees(c, tp_canonical_chunks(c));
}

void check_tp_degree(const ModelConfig& c, int32_t degree) { (void)tp_partition(c, degree); }

ModelConfig tp_rank_config(const ModelConfig& c, const TpPartition& p, int32_t rank) {
  check(rank >= 0 && rank < p.degree, "tensor-parallel rank {} outside 0…{}", rank,
        p.degree - 1);
  ModelConfig r = c;
  r.n_heads = p.n_q(rank);
  r.n_kv_heads = p.n_kv[rank];
  r.ffn_dim = p.n_ffn(rank);
  return r;
}

ModelWeights tp_rank_weights(const ModelWeights& full, const ModelConfig& c,
                             const TpPartition& p, int32_t rank) {
  check(rank >= 0 && rank < p.degree, "tensor-parallel rank {} outside 0…{}", rank,
        p.degree - 1);
  // The replicated tensors copied, the sharded ones sliced straight from `full` (no copy of the
  // whole model per rank), all in their stored dtypes.
  ModelWeights w;
  w.tok_embd = full.tok_embd;
  w.out_norm = full.out_norm;
  w.lm_head = full.lm_head;
  w.rope_freq_factors = full.rope_freq_factors;
  const int64_t hd = c.head_dim;
  const int64_t q0 = p.q_first(rank) * hd, nq = p.n_q(rank) * hd;
  const int64_t kv0 = p.kv_first[rank] * hd, nkv = p.n_kv[rank] * hd;
  const int64_t f0 = p.ffn_first(rank), nf = p.n_ffn(rank);
  for (const LayerWeights& f : full.layers) {
    check(f.wo.bias.empty() && f.w_down.bias.empty(),
          "tensor parallelism: o_proj/down_proj biases are not supported");
    LayerWeights& l = w.layers.emplace_back();
    l.attn_norm = f.attn_norm;
    l.q_norm = f.q_norm;
    l.k_norm = f.k_norm;
    l.ffn_norm = f.ffn_norm;
    l.wq = slice_linear_rows(f.wq, q0, nq);
    l.wk = slice_linear_rows(f.wk, kv0, nkv);
    l.wv = slice_linear_rows(f.wv, kv0, nkv);
    l.wo.w = tp_slice_cols(f.wo.w, q0, nq);
    l.w_gate = slice_linear_rows(f.w_gate, f0, nf);
    l.w_up = slice_linear_rows(f.w_up, f0, nf);
    l.w_down.w = tp_slice_cols(f.w_down.w, f0, nf);
  }
  return w;
}

TpRank tp_rank(const TpPartition& p, int32_t rank, TpExchange* exchange) {
  check(rank >= 0 && rank < p.degree, "tensor-parallel rank {} outside 0…{}", rank,
        p.degree - 1);
  TpRank r;
  r.chunks = p.chunks;
  r.local = {p.o[rank + 1] - p.o[rank], p.ffn[rank + 1] - p.ffn[rank]};
  r.degree = p.degree;
  r.rank = rank;
  r.exchange = exchange;
  return r;
}

void TpBarrier::arrive_and_wait() {
  if (aborted_.load(std::memory_order_acquire)) throw TpAborted();
  const uint32_t gen = generation_.load(std::memory_order_acquire);
  if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
    count_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    return;
  }
  bool passed = false;
  for (int i = 0; i < 4096 && !passed; ++i) {
    passed = generation_.load(std::memory_order_acquire) != gen;
    if (!passed) std::this_thread::yield();
  }
  while (!passed) {
    generation_.wait(gen, std::memory_order_acquire);
    passed = generation_.load(std::memory_order_acquire) != gen;
  }
  // abort() moves the generation on too: a waiter it woke did not meet its partners.
  if (aborted_.load(std::memory_order_acquire)) throw TpAborted();
}

void TpBarrier::abort() {
  aborted_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
}

TpExchange::TpExchange(int32_t degree)
    : degree_(degree), barrier_(degree), turn_(static_cast<size_t>(std::max(degree, 1)), 0) {
  check(degree >= 1, "tensor-parallel degree {} must be at least 1", degree);
  for (auto& s : slots_) s.assign(static_cast<size_t>(degree), Slot{});
}

// Exchange e uses slot set e % 2. After the rendezvous of exchange e every rank has published
// into set e % 2; a rank that finished copying may publish exchange e + 1 into the other set
// and wait at its rendezvous, which no rank passes before every rank has arrived there — that
// is, has finished copying exchange e. So set e % 2 is not overwritten (by exchange e + 2)
// while anybody still reads it.
void TpExchange::all_gather(int32_t rank, kernels::Ops& ops, const float* local, int64_t n,
                            float* all_out) {
  const int32_t set = turn_[static_cast<size_t>(rank)];
  turn_[static_cast<size_t>(rank)] ^= 1;
  slots_[set][static_cast<size_t>(rank)] = {local, n};
  barrier_.arrive_and_wait();  // every rank's partials of this exchange are published
  for (const Slot& s : slots_[set]) {
    ops.copy(all_out, s.data, static_cast<size_t>(s.n) * sizeof(float));
    all_out += s.n;
  }
}

void tp_tree_sum(kernels::Ops& ops, float* parts, int32_t n_parts, int64_t n) {
  for (int32_t s = 1; s < n_parts; s *= 2)
    for (int32_t i = 0; i + s < n_parts; i += 2 * s) ops.add(parts + i * n, parts + (i + s) * n, n);
}

}  // namespace detllm
