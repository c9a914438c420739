// A tensor-parallel group whose ranks are threads of one process (model/tensor_parallel.h):
// rank 0's model is leader() — the model the engine, the conformance suite or a test runs like
// any other. Ranks 1… run beside it on threads of their own, each on its own ops, weights and
// KV storage: every forward of the leader runs the same step on every rank (the ranks meet in
// the row-parallel layers' exchange), every KV block copy is made on every rank. The logits of
// every rank are the same bits; the leader's are returned. Host backends, or CUDA ops on one GPU
// (each rank its stream; the exchange copies on the device).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"
#include "model/llama_weights.h"
#include "model/step_padding.h"
#include "model/tensor_parallel.h"

namespace detllm {

class TpGroup {
 public:
  // make_ops() makes one rank's host ops (each rank its own, e.g. make_cpu_ops(threads / degree)).
  // Throws detllm::Error when the model does not split into `degree` ranks (check_tp_degree).
  TpGroup(const ModelConfig& config, const ModelWeights& weights, int32_t degree,
          const std::function<std::unique_ptr<kernels::Ops>()>& make_ops);
  ~TpGroup();
  TpGroup(const TpGroup&) = delete;
  TpGroup& operator=(const TpGroup&) = delete;

  LlamaModel& leader() { return *ranks_[0]->model; }
  int32_t degree() const { return static_cast<int32_t>(ranks_.size()); }
  TpChunks chunks() const { return partition_.chunks; }
  const TpPartition& partition() const { return partition_; }
  // Every rank's KV heads together (the ranks share one device; replicated heads count on each).
  int32_t kv_heads_on_device() const;

  // LlamaModel's hooks (the leader calls them): one step on every rank, the leader's part
  // (`leader_step`, run on the calling thread) beside the others'; a block copy on every rank.
  LlamaModel::StepLogits forward(std::span<const int32_t> tokens, const kernels::StepBatch& batch,
                                 std::span<const int32_t> logit_rows, KvStorage& leader_kv,
                                 const DecodePadding& padding,
                                 const std::function<LlamaModel::StepLogits()>& leader_step);
  void copy_block(const KvStorage& leader_kv, int32_t src, int32_t dst);
  // LlamaModel::prepare_gemms on every rank, each on its own thread (its own shapes and ops).
  void prepare_gemms(int32_t max_rows);

  // New weights for every rank (the same config and partition): each rank's slices, and its
  // model with the chunk copies it makes of them, are made again from `weights`, and the KV
  // mirrors are dropped. Between steps only; leader() is a new model afterwards, so whatever
  // refers to the old one (an Engine) must be dropped first and made again.
  void reload(const ModelConfig& config, const ModelWeights& weights);

 private:
  struct Rank {
    ModelConfig config;    // the rank's (tp_rank_config)
    ModelWeights weights;  // the rank's (tp_rank_weights): the model reads them in place
    std::unique_ptr<kernels::Ops> ops;
    std::unique_ptr<LlamaModel> model;
  };
  // Rank r's slices of `weights` and its model over them (the constructor and reload).
  void make_rank_model(size_t r, const ModelConfig& config, const ModelWeights& weights);
  // The storages of ranks 1… that mirror the leader's `kv` (made on first use, same blocks).
  std::vector<KvStorage*> follower_kv(const KvStorage& kv);

  // Ranks 1… wait on threads of their own for the leader's steps.
  void worker(size_t rank);
  // job(r) on every rank r at once: rank 0 on the calling thread, the others on theirs. A rank
  // that throws aborts the exchange; the first real error is rethrown, naming its rank, and the
  // group refuses every later job.
  void run_on_every_rank(const std::function<void(size_t rank)>& job);

  TpPartition partition_;
  TpExchange exchange_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  // The step the workers run next (set by the leader between the two rendezvous).
  std::function<void(size_t rank)> job_;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
  // Set by a step in which a rank failed ("rank R of T: what"): the exchange was aborted, so
  // the group refuses every later step.
  std::string failure_;
  TpBarrier start_, done_;
  std::vector<std::thread> threads_;
  std::map<uint64_t, std::vector<std::unique_ptr<KvStorage>>> kv_;  // leader KV id → ranks 1…
  std::vector<uint64_t> kv_order_;  // ids, oldest first (the oldest are dropped past a few)
};

}  // namespace detllm
