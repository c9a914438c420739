// The canonical TP partition's pieces (see tensor_parallel.h).
#include "model/tensor_parallel.h"

#include <algorithm>
#include <string>
#include <thread>

#include "core/error.h"

namespace detllm {
namespace {

// Rows [r0, r0 + n) of an fp32 (rows, cols) tensor.
HostTensor slice_rows(const HostTensor& t, int64_t r0, int64_t n) {
  const int64_t cols = t.shape.at(1);
  HostTensor s;
  s.shape = {n, cols};
  s.data.assign(t.data.begin() + r0 * cols, t.data.begin() + (r0 + n) * cols);
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
  s.data.resize(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(t.data.begin() + r * cols + c0, n, s.data.begin() + r * n);
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

void check_tp_degree(const ModelConfig& c, int32_t degree) {
  const TpChunks k = tp_canonical_chunks(c);
  std::string allowed;
  for (int32_t d = 1; d <= c.n_kv_heads; ++d)
    if (c.n_kv_heads % d == 0 && k.o % d == 0 && k.ffn % d == 0)
      allowed += (allowed.empty() ? "" : ", ") + std::to_string(d);
  check(degree >= 1 && c.n_kv_heads % degree == 0 && k.o % degree == 0 && k.ffn % degree == 0,
        "tensor-parallel degree {} does not divide this model ({} KV heads, {} o_proj chunks, {} "
        "down_proj chunks); it allows {}",
        degree, c.n_kv_heads, k.o, k.ffn, allowed);
}

ModelConfig tp_rank_config(const ModelConfig& c, int32_t degree) {
  check_tp_degree(c, degree);
  ModelConfig r = c;
  r.n_heads = c.n_heads / degree;
  r.n_kv_heads = c.n_kv_heads / degree;
  r.ffn_dim = c.ffn_dim / degree;
  return r;
}

ModelWeights tp_rank_weights(const ModelWeights& full, const ModelConfig& c, int32_t degree,
                             int32_t rank) {
  check_tp_degree(c, degree);
  check(rank >= 0 && rank < degree, "tensor-parallel rank {} outside 0…{}", rank, degree - 1);
  ModelWeights w = full;
  dequantize_weights(w);
  const int64_t hd = c.head_dim;
  const int64_t q_rows = int64_t{c.n_heads / degree} * hd;
  const int64_t kv_rows = int64_t{c.n_kv_heads / degree} * hd;
  const int64_t ffn = c.ffn_dim / degree;
  for (LayerWeights& l : w.layers) {
    check(l.wo.bias.empty() && l.w_down.bias.empty(),
          "tensor parallelism: o_proj/down_proj biases are not supported");
    l.wq = slice_linear_rows(l.wq, rank * q_rows, q_rows);
    l.wk = slice_linear_rows(l.wk, rank * kv_rows, kv_rows);
    l.wv = slice_linear_rows(l.wv, rank * kv_rows, kv_rows);
    l.wo.w = tp_slice_cols(l.wo.w, rank * q_rows, q_rows);
    l.w_gate = slice_linear_rows(l.w_gate, rank * ffn, ffn);
    l.w_up = slice_linear_rows(l.w_up, rank * ffn, ffn);
    l.w_down.w = tp_slice_cols(l.w_down.w, rank * ffn, ffn);
  }
  return w;
}

void TpBarrier::arrive_and_wait() {
  const uint32_t gen = generation_.load(std::memory_order_acquire);
  if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
    count_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    return;
  }
  for (int i = 0; i < 4096; ++i) {
    if (generation_.load(std::memory_order_acquire) != gen) return;
    std::this_thread::yield();
  }
  while (generation_.load(std::memory_order_acquire) == gen)
    generation_.wait(gen, std::memory_order_acquire);
}

TpExchange::TpExchange(int32_t degree)
    : degree_(degree), barrier_(degree), turn_(static_cast<size_t>(std::max(degree, 1)), 0) {
  check(degree >= 1, "tensor-parallel degree {} must be at least 1", degree);
  for (auto& s : slots_) s.assign(static_cast<size_t>(degree), nullptr);
}

// Exchange e uses slot set e % 2. After the rendezvous of exchange e every rank has published
// into set e % 2; a rank that finished copying may publish exchange e + 1 into the other set
// and wait at its rendezvous, which no rank passes before every rank has arrived there — that
// is, has finished copying exchange e. So set e % 2 is not overwritten (by exchange e + 2)
// while anybody still reads it.
void TpExchange::all_gather(int32_t rank, const float* local, int64_t n, float* all_out) {
  const int32_t set = turn_[static_cast<size_t>(rank)];
  turn_[static_cast<size_t>(rank)] ^= 1;
  slots_[set][static_cast<size_t>(rank)] = local;
  barrier_.arrive_and_wait();  // every rank's partials of this exchange are published
  for (int32_t r = 0; r < degree_; ++r)
    std::copy_n(slots_[set][static_cast<size_t>(r)], n, all_out + r * n);
}

void tp_tree_sum(kernels::Ops& ops, float* parts, int32_t n_parts, int64_t n) {
  for (int32_t s = 1; s < n_parts; s *= 2)
    for (int32_t i = 0; i + s < n_parts; i += 2 * s) ops.add(parts + i * n, parts + (i + s) * n, n);
}

}  // namespace detllm
