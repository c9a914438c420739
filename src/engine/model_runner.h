// ModelRunner: executes a scheduler StepPlan on the model — applies the plan's KV block
// copies and runs one forward over the plan's tokens. The step's logits stay in backend
// memory: rows are sampled there (one Ops::sample_rows call; only tokens, logprobs and top
// logprobs come back) and downloaded only for whoever reads them (prompt logprobs, captured
// logits, host sampling). It owns the KV memory (plus the pad slots of padded decode steps,
// model/step_padding.h); which block holds what is the scheduler's business.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "kernels/ops.h"
#include "kernels/sampling/logit_penalties.h"
#include "kernels/sampling/sample_row.h"
#include "model/decode_warmup.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"
#include "model/step_padding.h"

namespace detllm::engine {

class ModelRunner {
 public:
  // graphs: how decode steps execute (EngineConfig::cuda_graphs); changes no bit (V8).
  ModelRunner(const LlamaModel& model, int32_t n_blocks, int32_t block_size,
              DecodePadding padding = {});

  // Runs the plan's forward. Its logits — (plan.logit_rows.size(), vocab), row i for
  // plan.logit_rows[i] — stay in backend memory until the next run(). Every GEMM runs with
  // plan.numerics over the same weights and KV — kFast in steps without deterministic rows
  // and in the verified mode's fast steps; kInvariant means the ops' own numerics (a fast ops
  // object stays fast: Ops::gemm_numerics). fixed_shape: a decode step is padded to the
  // padding's fixed_rows (the padded mode's deterministic steps); otherwise to buckets.
  void run(const StepPlan& plan, bool fixed_shape = true);

  // out[i] = the sampler's result (kernels/sampling/sampler.h) for logit row rows[i] of this step
  // with params[i], in one Ops::sample_rows call (bit-identical to detllm::sample() on every
  // backend). rows may repeat (the n samples of a prompt draw from one row) and come in any
  // order; a contiguous ascending run is sampled in place, anything else gathered first
  // (a copy on the backend). penalties (kernels/sampling/logit_penalties.h; entry row = index
  // i of rows) are applied first, to a copy of the rows (the step's logits stay the model's).
  // Throws detllm::Error like sample().
  // masks.begin empty: no row has a token mask (Ops::sample_rows); else one entry a row, and
  // the call is Ops::sample_rows_masked (applied after the penalties).
  void sample(std::span<const int32_t> rows, std::span<const SampleRowParams> params,
              std::span<SampleRowResult> out, std::span<const LogitPenalty> penalties = {},
              std::span<const uint32_t> mask_words = {}, std::span<const int64_t> mask_begin = {});

  // Logit rows [first_row, first_row + n_rows) of this step on the host ((n_rows, vocab)
  // floats), downloaded on first use; valid until the next run().
  std::span<const float> host_logits(int32_t first_row, int32_t n_rows);

  int32_t n_logit_rows() const { return logits_.n_rows; }
  // Logit rows downloaded and rows sampled on the backend, over every step so far.
  int64_t n_logit_rows_downloaded() const { return n_rows_downloaded_; }
  int64_t n_rows_sampled() const { return n_rows_sampled_; }

  const LlamaModel& model() const { return model_; }
  const DecodePadding& padding() const { return padding_; }
  // Runs warm_up_decode_steps (model/decode_warmup.h) on this runner's KV pad slots for the
  // shapes of decode steps of up to max_seqs sequences and max_tokens tokens, under each of
  // `numerics`, at most `limit` shapes per numerics. The GEMMs are prepared for steps of up to
  // max_step_tokens first (LlamaModel::prepare_gemms): on CUDA that also gives the GEMM scratch
  // its size, so a later prefill does not move it and retire the graphs.
  DecodeWarmupResult warm_up(std::span<const NumericsMode> numerics, int32_t max_seqs,
                             int32_t max_tokens, int32_t max_step_tokens, size_t limit,
                             const std::function<void(size_t, size_t)>& progress);

 private:
  const LlamaModel& model_;
  DecodePadding padding_;
  KvStorage kv_;
  LlamaModel::StepLogits logits_;  // this step's, in backend memory
  std::vector<float> host_;        // (n_logit_rows, vocab) host copies of downloaded rows
  std::vector<bool> on_host_;      // (n_logit_rows) row already in host_
  kernels::Buffer gather_rows_;    // (capacity) int32 row indices, backend memory
  kernels::Buffer gathered_;       // (capacity, vocab) gathered rows to sample, backend memory
  int32_t gather_capacity_ = 0;
  int64_t n_rows_downloaded_ = 0;
  int64_t n_rows_sampled_ = 0;
};

}  // namespace detllm::engine
