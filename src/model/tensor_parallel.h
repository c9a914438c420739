// Tensor parallelism whose bits do not depend on the TP degree (design.md section 8; issue 17):
// the canonical partition of a Llama-family model over `degree` ranks.
//   column-parallel  q/k/v by head (a rank's q heads are whole KV groups or part of one, its
//                    KV heads those they use, replicated where ranks share one: TpPartition),
//                    gate/up by FFN slice: no reduction crosses ranks, and every output
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
// The ranks are threads of one process, each with its own ops: CPU ops (tests, CI), or CUDA ops
// on one GPU (tests/cuda/cuda_tensor_parallel_test.cpp: the degree changes no bit there either).
// One process per GPU with NCCL's all-gather of the fp32 partials (the same tree) is
// docs/tensor_parallel.md's plan. Tests: tests/model/tensor_parallel_test.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/error.h"
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

// Which chunks, heads and FFN rows each rank of a degree-T group holds. Rank r holds the o
// chunks [o[r], o[r+1]) and the down chunks [ffn[r], ffn[r+1]) — contiguous ranges, rank order
// is chunk order, ranges may be uneven — and the q heads of its o chunks. Its q heads are
// either whole KV groups (the KV heads of those groups) or part of ONE group, whose KV head
// the rank then holds too: a KV head shared by the q heads of several ranks is replicated on
// each (its k/v rows computed and stored on each, the same bits: vLLM's way for T > KV heads).
// So every rank's q heads map onto its KV heads as in the model (q head i of the rank uses
// KV head i / (its q heads / its KV heads)), and the per-head arithmetic is unchanged.
//   T <= KV heads: rank r holds KV groups [r·KV/T, (r+1)·KV/T) (floors);
//   T >  KV heads: group g is split over ranks [g·T/KV, (g+1)·T/KV), each taking a
//                  contiguous part of the group's o chunks.
// A degree is allowed when every rank gets at least one chunk of each, on head boundaries
// that these rules can place (SmolLM2-135M, 9 q / 3 KV heads, chunks 9/8: degrees 1-8).
struct TpPartition {
  TpChunks chunks;  // the model's canonical counts: the same at every degree
  int32_t degree = 1;
  std::vector<int32_t> o, ffn;            // degree + 1 chunk boundaries each
  std::vector<int32_t> kv_first, n_kv;    // per rank: its first KV head and how many
  int32_t heads_per_o_chunk = 1;          // q heads per o chunk
  int32_t rows_per_ffn_chunk = 1;         // FFN features per down chunk
  int32_t q_first(int32_t rank) const { return o[rank] * heads_per_o_chunk; }
  int32_t n_q(int32_t rank) const { return (o[rank + 1] - o[rank]) * heads_per_o_chunk; }
  int32_t ffn_first(int32_t rank) const { return ffn[rank] * rows_per_ffn_chunk; }
  int32_t n_ffn(int32_t rank) const { return (ffn[rank + 1] - ffn[rank]) * rows_per_ffn_chunk; }
};

// The partition of `config` over `degree` ranks with `chunks` (default: the canonical ones),
// or nothing when the degree is not allowed.
std::optional<TpPartition> tp_try_partition(const ModelConfig& config, int32_t degree,
                                            TpChunks chunks);
// The same; throws detllm::Error, naming the degrees the model allows, when it is not allowed.
TpPartition tp_partition(const ModelConfig& config, int32_t degree, TpChunks chunks);
TpPartition tp_partition(const ModelConfig& config, int32_t degree);
// The allowed degrees with the canonical chunks, ascending (1 always).
std::vector<int32_t> tp_allowed_degrees(const ModelConfig& config);

// Throws detllm::Error, saying which degrees the model allows, unless the canonical partition
// over `degree` ranks exists.
void check_tp_degree(const ModelConfig& config, int32_t degree);

// Rank `rank`'s own config: its q heads, KV heads and FFN rows (dim, vocab unchanged).
ModelConfig tp_rank_config(const ModelConfig& config, const TpPartition& part, int32_t rank);

// Rank `rank`'s weights for tp_rank_config, in the stored dtypes (tp_slice_cols: a column
// slice off block boundaries is widened to fp32, the same values): q rows (and biases) of its
// q heads, k/v rows of its KV heads, gate/up rows of its FFN rows, o and down columns of its K
// ranges; the rest copied whole.
ModelWeights tp_rank_weights(const ModelWeights& full, const ModelConfig& config,
                             const TpPartition& part, int32_t rank);

// Columns [c0, c0 + n) of a (rows, cols) host tensor, as a new (rows, n) tensor (rank slices
// and canonical chunks of the row-parallel weights): in t's dtype when c0 and n fall on its
// block boundaries (every column of fp32/f16/bf16; 32 for Q4_0/Q4_1/Q8_0, 256 for the
// k-quants), else widened to fp32 (formats/dequant.h: the same values, which the CPU backend's
// block kernels decode with the same bits).
HostTensor tp_slice_cols(const HostTensor& t, int64_t c0, int64_t n);

// Thrown by a rank's exchange when another rank of the group failed (TpExchange::abort): the
// rank stops instead of waiting for a partner that never comes.
class TpAborted : public Error {
 public:
  TpAborted() : Error("tensor parallelism: another rank of the group failed") {}
};

// A rendezvous of n threads that yields while it waits, then sleeps (C++20 atomic wait):
// cheap when the ranks run at once, and it gives the cores away when they do not.
class TpBarrier {
 public:
  explicit TpBarrier(int32_t n) : n_(n) {}
  // Throws TpAborted, on arrival or while waiting, once abort() was called.
  void arrive_and_wait();
  // Wakes every waiter, which throws TpAborted, and makes every later arrival throw. For
  // good: the group is unusable afterwards.
  void abort();

 private:
  const int32_t n_;
  std::atomic<int32_t> count_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> aborted_{false};
};

// The exchange of ranks that are threads of one process: a rendezvous of all `degree` ranks.
class TpExchange {
 public:
  explicit TpExchange(int32_t degree);
  int32_t degree() const { return degree_; }
  // Called by every rank, each with its own n (uneven ranks): all_out receives every rank's n
  // floats, concatenated in rank order, copied by the calling rank's `ops` (Ops::copy: memcpy
  // on the CPU; on CUDA an async device copy on the rank's stream, reading the other ranks'
  // buffers — ranks of one device, or devices that reach each other's memory). `local` must be
  // complete when the rank arrives (a CUDA rank synchronizes first) and stay unchanged until
  // the rank's next-but-one exchange (LlamaModel alternates two buffers); one rendezvous. A
  // rank's copies are done by its next exchange, because it synchronizes before arriving there.
  void all_gather(int32_t rank, kernels::Ops& ops, const float* local, int64_t n,
                  float* all_out);
  // A rank failed: every rank in or entering all_gather throws TpAborted (TpBarrier::abort).
  void abort() { barrier_.abort(); }

 private:
  int32_t degree_;
  TpBarrier barrier_;
  // Two sets of slots, used in turn: a rank may publish the next exchange's partials while a
  // slower one still copies this one's, so one rendezvous per exchange suffices.
  struct Slot {
    const float* data = nullptr;
    int64_t n = 0;
  };
  std::vector<Slot> slots_[2];
  std::vector<int32_t> turn_;  // per rank: which set its next exchange uses
};

// What one rank's LlamaModel needs for its row-parallel layers.
struct TpRank {
  TpChunks chunks;                 // the model's canonical counts ({1, 1}: one-device numerics)
  TpChunks local;                  // how many of them this rank holds (TpPartition)
  int32_t degree = 1, rank = 0;
  TpExchange* exchange = nullptr;  // required when degree > 1
  bool active() const { return degree > 1 || chunks.o > 1 || chunks.ffn > 1; }
};

// Rank `rank` of `part`, meeting the others in `exchange` (nullptr at degree 1).
TpRank tp_rank(const TpPartition& part, int32_t rank, TpExchange* exchange);

// parts (n_parts × n floats, backend memory) summed in the canonical tree: for s = 1, 2, 4, …,
// parts[i] += parts[i + s] for every i that is a multiple of 2s with i + s < n_parts (each add
// one fp32 rounding, Ops::add). The sum ends in parts[0]; the tree depends on n_parts alone.
void tp_tree_sum(kernels::Ops& ops, float* parts, int32_t n_parts, int64_t n);

}  // namespace detllm
