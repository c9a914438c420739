// ModelRunner: StepPlan → forward → logits in backend memory → sampled rows, downloaded rows.
#include "engine/model_runner.h"

#include <algorithm>

#include "core/error.h"

namespace detllm::engine {
namespace {
// Pad slots only where decode steps may be padded (step_padding.h's decision needs them), as
// many as the decode warm-up's largest step uses (decode_warmup.h: R rows on R pad slots).
int32_t pad_slots_for(const LlamaModel& model, const DecodePadding& padding) {
  return decode_warmup_pad_slots(padding, model.graph_capture() != nullptr);
}
}  // namespace

ModelRunner::ModelRunner(const LlamaModel& model, int32_t n_blocks, int32_t block_size,
                         DecodePadding padding)
    : model_(model),
      padding_(padding),
      kv_(model.ops(), model.config(), n_blocks, block_size, pad_slots_for(model, padding)) {}

void ModelRunner::run(const StepPlan& plan, bool fixed_shape) {
  for (const BlockCopy& c : plan.copies) model_.copy_kv_block(kv_, c.src, c.dst);
  const DecodePadding padding = fixed_shape ? padding_ : DecodePadding{padding_.mode, 0};
  logits_ = model_.forward(plan.token_ids, plan.batch(), plan.logit_rows, kv_, padding);
  on_host_.assign(static_cast<size_t>(logits_.n_rows), false);
}

DecodeWarmupResult ModelRunner::warm_up(std::span<const NumericsMode> numerics, int32_t max_seqs,
                                        int32_t max_tokens, int32_t max_step_tokens, size_t limit,
                                        const std::function<void(size_t, size_t)>& progress) {
  // Only graphs make a warm-up worth anything (kOn pads eagerly on a backend without them).
  if (model_.graph_capture() == nullptr) return {};
  model_.prepare_gemms(max_step_tokens);  // a no-op where the plans exist already
  const std::vector<PaddedStepKey> keys =
      decode_warmup_keys(padding_, true, max_seqs, max_tokens, kv_.block_size(), limit);
  return warm_up_decode_steps(model_, kv_, padding_, keys, numerics, progress);
}

void ModelRunner::sample(std::span<const int32_t> rows, std::span<const SampleRowParams> params,
                         std::span<SampleRowResult> out, std::span<const LogitPenalty> penalties,
                         std::span<const uint32_t> mask_words,
                         std::span<const int64_t> mask_begin) {
  check(rows.size() == params.size() && rows.size() == out.size() &&
            (mask_begin.empty() || mask_begin.size() == rows.size()),
        "ModelRunner::sample: {} rows, {} params, {} results, {} masks", rows.size(),
        params.size(), out.size(), mask_begin.size());
  const size_t n_words = (static_cast<size_t>(logits_.vocab) + 31) / 32;
  for (int64_t b : mask_begin) {
    check(b < 0 || static_cast<size_t>(b) + n_words <= mask_words.size(),
          "ModelRunner::sample: a mask at word {} of {}", b, mask_words.size());
  }
  const int32_t n = static_cast<int32_t>(rows.size());
  if (n == 0) return;
  for (int32_t r : rows) {
    check(r >= 0 && r < logits_.n_rows,
          "ModelRunner::sample: row {} outside the step's {} "
          "logit rows",
          r, logits_.n_rows);
  }
  kernels::Ops& ops = model_.ops();
  const size_t vocab = static_cast<size_t>(logits_.vocab);
  // The usual decode step samples rows 0 … n-1 once each: sample the logits where they are.
  // Penalties change a copy (a row may also be read as the model's: captured logits).
  bool contiguous = penalties.empty();
  for (int32_t i = 1; i < n && contiguous; ++i) contiguous = rows[i] == rows[0] + i;
  const float* src = logits_.data + static_cast<size_t>(rows[0]) * vocab;
  if (!contiguous) {
    if (n > gather_capacity_) {
      gather_capacity_ = std::max(n, 2 * gather_capacity_);
      gather_rows_ = {ops, static_cast<size_t>(gather_capacity_) * sizeof(int32_t)};
      gathered_ = {ops, static_cast<size_t>(gather_capacity_) * vocab * sizeof(float)};
    }
    ops.upload(gather_rows_.data(), rows.data(), rows.size_bytes());
    ops.gather_rows(logits_.data, logits_.vocab, gather_rows_.i32(), n, gathered_.f32());
    if (!penalties.empty()) {
      ops.apply_logit_penalties(gathered_.f32(), n, logits_.vocab, penalties.data(),
                                static_cast<int32_t>(penalties.size()));
    }
    src = gathered_.f32();
  }
  if (mask_begin.empty()) {
    ops.sample_rows(src, n, logits_.vocab, params.data(), out.data());
  } else {
    ops.sample_rows_masked(src, n, logits_.vocab, params.data(),
                           RowMasks{mask_words.data(), mask_begin.data()}, out.data());
  }
  n_rows_sampled_ += n;
}

std::span<const float> ModelRunner::host_logits(int32_t first_row, int32_t n_rows) {
  check(first_row >= 0 && n_rows >= 0 && first_row + n_rows <= logits_.n_rows,
        "ModelRunner::host_logits: rows [{}, {}) outside the step's {} logit rows", first_row,
        first_row + n_rows, logits_.n_rows);
  const size_t vocab = static_cast<size_t>(logits_.vocab);
  if (host_.size() < static_cast<size_t>(logits_.n_rows) * vocab) {
    host_.resize(static_cast<size_t>(logits_.n_rows) * vocab);
  }
  // Download each run of rows not yet on the host in one copy.
  for (int32_t r = first_row; r < first_row + n_rows;) {
    if (on_host_[r]) {
      ++r;
      continue;
    }
    int32_t end = r + 1;
    while (end < first_row + n_rows && !on_host_[end]) ++end;
    model_.download_logits(logits_, r, end - r, host_.data() + static_cast<size_t>(r) * vocab);
    for (int32_t i = r; i < end; ++i) on_host_[i] = true;
    n_rows_downloaded_ += end - r;
    r = end;
  }
  return {host_.data() + static_cast<size_t>(first_row) * vocab,
          static_cast<size_t>(n_rows) * vocab};
}

}  // namespace detllm::engine
