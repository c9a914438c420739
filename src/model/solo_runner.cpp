// SoloRunner: one sequence, contiguous blocks, one forward step per feed().
#include "model/solo_runner.h"

#include <numeric>

#include "core/error.h"

namespace detllm {

SoloRunner::SoloRunner(const LlamaModel& model, int32_t max_tokens, int32_t block_size)
    : model_(model), max_tokens_(max_tokens),
      kv_(model.ops(), model.config(), (max_tokens + block_size - 1) / block_size, block_size) {
  block_table_.resize(kv_.n_blocks());
  std::iota(block_table_.begin(), block_table_.end(), 0);
}

std::vector<float> SoloRunner::feed(std::span<const int32_t> tokens, bool all_logits) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  check(n > 0, "feed: no tokens");
  check(n_tokens_ + n <= max_tokens_, "sequence of {} tokens exceeds this runner's {} tokens",
        n_tokens_ + n, max_tokens_);
  std::vector<int32_t> positions(n), seq(n, 0), slots(n);
  for (int32_t i = 0; i < n; ++i) {
    positions[i] = n_tokens_ + i;
    slots[i] = positions[i];  // identity block table: slot == position
  }
  kernels::StepBatch batch;
  batch.n_tokens = n;
  batch.positions = positions.data();
  batch.seq_of_token = seq.data();
  batch.slots = slots.data();
  batch.n_seqs = 1;
  batch.max_blocks = static_cast<int32_t>(block_table_.size());
  batch.block_tables = block_table_.data();
  std::vector<int32_t> rows;
  if (all_logits) {
    rows.resize(n);
    std::iota(rows.begin(), rows.end(), 0);
  } else {
    rows.push_back(n - 1);
  }
  std::vector<float> logits;
  model_.forward(tokens, batch, rows, kv_, logits);
  n_tokens_ += n;
  return logits;
}

}  // namespace detllm
