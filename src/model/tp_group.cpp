// A tensor-parallel group of ranks as threads (see tp_group.h).
#include "model/tp_group.h"

#include <fmt/format.h>

#include "core/error.h"

namespace detllm {
namespace {
constexpr size_t kKeptStorages = 8;  // leader KV storages whose mirrors are kept
}  // namespace

TpGroup::TpGroup(const ModelConfig& config, const ModelWeights& weights, int32_t degree,
                 const std::function<std::unique_ptr<kernels::Ops>()>& make_ops)
    : partition_(tp_partition(config, degree)),
      exchange_(degree),
      errors_(static_cast<size_t>(degree)),
      start_(degree),
      done_(degree) {
  for (int32_t r = 0; r < degree; ++r) {
    auto rank = std::make_unique<Rank>();
    rank->config = tp_rank_config(config, partition_, r);
    rank->ops = make_ops();
    check(rank->ops != nullptr, "tensor parallelism: no ops for rank {}", r);
    ranks_.push_back(std::move(rank));
    make_rank_model(ranks_.size() - 1, config, weights);
  }
  ranks_[0]->model->set_tp_group(this);
  for (size_t r = 1; r < ranks_.size(); ++r) threads_.emplace_back([this, r] { worker(r); });
}

int32_t TpGroup::kv_heads_on_device() const {
  int32_t n = 0;
  for (const auto& r : ranks_) n += r->config.n_kv_heads;
  return n;
}

void TpGroup::make_rank_model(size_t r, const ModelConfig& config, const ModelWeights& weights) {
  Rank& rank = *ranks_[r];
  rank.model.reset();  // before the weights it reads in place
  rank.weights = tp_rank_weights(weights, config, partition_, static_cast<int32_t>(r));
  rank.model = std::make_unique<LlamaModel>(rank.config, rank.weights, *rank.ops,
                                            ProjectionLayout::kAuto,
                                            tp_rank(partition_, static_cast<int32_t>(r),
                                                    partition_.degree > 1 ? &exchange_ : nullptr));
}

void TpGroup::reload(const ModelConfig& config, const ModelWeights& weights) {
  kv_.clear();  // mirrors of pools that held the old weights' KV
  kv_order_.clear();
  for (size_t r = 0; r < ranks_.size(); ++r) make_rank_model(r, config, weights);
  ranks_[0]->model->set_tp_group(this);
}

TpGroup::~TpGroup() {
  if (threads_.empty()) return;
  stop_ = true;
  start_.arrive_and_wait();
  for (std::thread& t : threads_) t.join();
}

void TpGroup::worker(size_t rank) {
  ranks_[rank]->ops->bind_thread();  // CUDA: the rank's device is per thread
  for (;;) {
    start_.arrive_and_wait();
    if (stop_) return;
    try {
      job_(rank);
    } catch (...) {
      errors_[rank] = std::current_exception();
      exchange_.abort();  // the others stop at their next exchange instead of waiting for this one
    }
    done_.arrive_and_wait();
  }
}

std::vector<KvStorage*> TpGroup::follower_kv(const KvStorage& kv) {
  auto it = kv_.find(kv.id());
  if (it == kv_.end()) {
    std::vector<std::unique_ptr<KvStorage>> mirrors;
    for (size_t r = 1; r < ranks_.size(); ++r)
      mirrors.push_back(std::make_unique<KvStorage>(*ranks_[r]->ops, ranks_[r]->config, kv.n_blocks(),
                                                    kv.block_size(), kv.n_pad_slots()));
    it = kv_.emplace(kv.id(), std::move(mirrors)).first;
    kv_order_.push_back(kv.id());
    if (kv_order_.size() > kKeptStorages) {
      kv_.erase(kv_order_.front());
      kv_order_.erase(kv_order_.begin());
    }
  }
  std::vector<KvStorage*> out;
  for (auto& m : it->second) out.push_back(m.get());
  return out;
}

void TpGroup::run_on_every_rank(const std::function<void(size_t rank)>& job) {
  check(failure_.empty(),
        "tensor parallelism: the group stopped at an earlier failure and cannot run again ({})",
        failure_);
  job_ = job;
  for (std::exception_ptr& e : errors_) e = nullptr;
  start_.arrive_and_wait();  // the workers take the job
  try {
    job(0);
  } catch (...) {
    errors_[0] = std::current_exception();
    exchange_.abort();
  }
  done_.arrive_and_wait();  // every rank finished it, or stopped at an exchange
  job_ = nullptr;
  // The first failure that is not another rank's stopping (TpAborted), named by its rank.
  for (int pass = 0; pass < 2; ++pass)
    for (size_t r = 0; r < errors_.size(); ++r) {
      if (!errors_[r]) continue;
      try {
        std::rethrow_exception(errors_[r]);
      } catch (const TpAborted& e) {
        if (pass == 0) continue;
        failure_ = fmt::format("rank {} of {}: {}", r, ranks_.size(), e.what());
      } catch (const std::exception& e) {
        failure_ = fmt::format("rank {} of {}: {}", r, ranks_.size(), e.what());
      }
      throw_error("tensor parallelism: {}", failure_);
    }
}

LlamaModel::StepLogits TpGroup::forward(
    std::span<const int32_t> tokens, const kernels::StepBatch& batch,
    std::span<const int32_t> logit_rows, KvStorage& leader_kv, const DecodePadding& padding,
    const std::function<LlamaModel::StepLogits()>& leader_step) {
  const std::vector<KvStorage*> kv = follower_kv(leader_kv);
  LlamaModel::StepLogits out;
  run_on_every_rank([&](size_t r) {
    if (r == 0)
      out = leader_step();
    else
      ranks_[r]->model->forward_rank(tokens, batch, logit_rows, *kv[r - 1], padding);
  });
  return out;
}

void TpGroup::prepare_gemms(int32_t max_rows) {
  run_on_every_rank([&](size_t r) { ranks_[r]->model->prepare_rank_gemms(max_rows); });
}

void TpGroup::copy_block(const KvStorage& leader_kv, int32_t src, int32_t dst) {
  for (KvStorage* kv : follower_kv(leader_kv)) kv->copy_block(src, dst);
}

}  // namespace detllm
