// Tensor parallelism whose bits do not depend on the TP degree (design.md section 8; issue 17):
// the canonical partition of a Llama-family model over `degree` ranks.
//   column-parallel  q/k/v by KV-head group (rank r: KV heads [r·KV/T, (r+1)·KV/T) and their q
//                    heads), gate/up by FFN slice: no reduction crosses ranks, and every output
//                    feature keeps its one-device K order;
//   row-parallel     o (K = the q heads) and down (K = the FFN): K is cut into C canonical chunks,
//                    C a function of the config alone (tp_canonical_chunks). Each chunk's
//                    partial is one GEMM over its K range; the C partials are summed in ONE
//                    fixed pairwise tree over chunk index (tp_tree_sum) — at every degree, TP 1
//                    included. A rank never sums its own chunks first: it computes their
//                    partials, the partials are all-gathered in chunk order (TpExchange), and
//                    every rank sums all C in the tree, so every rank holds the same bits;
//   replicated       embedding, norms, residual stream, lm_head.
// So TP 1, 2, 4 … give the same logits: the degree is not part of the numerics (nor of the
// fingerprint); the chunk counts are. With chunks {1, 1} and degree 1 nothing changes from the
// one-device model (LlamaModel without a TpRank).
// This file is the CPU form, ranks as threads of one process (tests, CI); the CUDA form (one
// process per GPU, NCCL all-gather of the fp32 partials, the same tree) is docs/tensor_parallel.md's
// plan. Tests: tests/model/tensor_parallel_test.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/llama_weights.h"

namespace detllm {

// The canonical chunk counts of the two row-parallel layers.
struct TpChunks {
  int32_t o = 1;    // chunks of o_proj's K (whole q heads each)
  int32_t ffn = 1;  // chunks of down_proj's K (multiples of 8 features each)
  bool operator==(const TpChunks&) const = default;
};

// o: 8 chunks when n_heads % 8 == 0 (Llama-3.1-8B: 4 heads each), else one per q head;
// ffn: the largest of 8, 4, 2 that cuts ffn_dim into equal multiples of 8, else 1. A function
// of the config alone: the same at every degree.
TpChunks tp_canonical_chunks(const ModelConfig& config);

// Throws detllm::Error, saying which degrees the model allows, unless degree ≥ 1 divides
// n_kv_heads and both chunk counts.
void check_tp_degree(const ModelConfig& config, int32_t degree);

// A rank's own config: n_heads, n_kv_heads and ffn_dim divided by degree (dim, vocab unchanged).
ModelConfig tp_rank_config(const ModelConfig& config, int32_t degree);

// Rank `rank`'s weights for tp_rank_config, in fp32 (quantized matrices dequantized: the same
// values, formats/dequant.h): q/k/v rows (and biases) of its heads, gate/up rows of its FFN
// slice, o and down columns of its K ranges; the rest copied whole.
ModelWeights tp_rank_weights(const ModelWeights& full, const ModelConfig& config, int32_t degree,
                             int32_t rank);

// Columns [c0, c0 + n) of an fp32 (rows, cols) host tensor, as a new (rows, n) tensor (rank
// slices and canonical chunks of the row-parallel weights).
HostTensor tp_slice_cols(const HostTensor& t, int64_t c0, int64_t n);

// A rendezvous of n threads that yields while it waits, then sleeps (C++20 atomic wait):
// cheap when the ranks run at once, and it gives the cores away when they do not.
class TpBarrier {
 public:
  explicit TpBarrier(int32_t n) : n_(n) {}
  void arrive_and_wait();

 private:
  const int32_t n_;
  std::atomic<int32_t> count_{0};
  std::atomic<uint32_t> generation_{0};
};

// The exchange of ranks that are threads of one process: a rendezvous of all `degree` ranks.
class TpExchange {
 public:
  explicit TpExchange(int32_t degree);
  int32_t degree() const { return degree_; }
  // Called by every rank with the same n: all_out (degree × n floats, rank order) receives each
  // rank's n floats. Host memory (the CPU backend's). One rendezvous: `local` must stay
  // unchanged until the rank's next-but-one exchange (LlamaModel alternates two buffers).
  void all_gather(int32_t rank, const float* local, int64_t n, float* all_out);

 private:
  int32_t degree_;
  TpBarrier barrier_;
  // Two sets of slots, used in turn: a rank may publish the next exchange's partials while a
  // slower one still copies this one's, so one rendezvous per exchange suffices.
  std::vector<const float*> slots_[2];
  std::vector<int32_t> turn_;  // per rank: which set its next exchange uses
};

// What one rank's LlamaModel needs for its row-parallel layers.
struct TpRank {
  TpChunks chunks;                 // the model's canonical counts ({1, 1}: one-device numerics)
  int32_t degree = 1, rank = 0;
  TpExchange* exchange = nullptr;  // required when degree > 1
  bool active() const { return degree > 1 || chunks.o > 1 || chunks.ffn > 1; }
};

// parts (n_parts × n floats, backend memory) summed in the canonical tree: for s = 1, 2, 4, …,
// parts[i] += parts[i + s] for every i that is a multiple of 2s with i + s < n_parts (each add
// one fp32 rounding, Ops::add). The sum ends in parts[0]; the tree depends on n_parts alone.
void tp_tree_sum(kernels::Ops& ops, float* parts, int32_t n_parts, int64_t n);

}  // namespace detllm
