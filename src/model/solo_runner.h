// Runs ONE sequence through the model with a private, contiguous KV cache — no scheduler, no
// batching. Used by the reference check against transformers and by model-level invariance
// tests (whole prompt vs chunks vs token by token); serving goes through engine/.
#pragma once

#include <span>
#include <vector>

#include "model/kv_storage.h"
#include "model/llama_model.h"

namespace detllm {

class SoloRunner {
 public:
  // max_tokens: the longest sequence this runner will hold (prompt + generated).
  SoloRunner(const LlamaModel& model, int32_t max_tokens, int32_t block_size = 16);

  // Appends tokens at the next positions in one forward step. Returns the logits of every
  // appended token (all_logits) or of the last one only: (rows, vocab).
  std::vector<float> feed(std::span<const int32_t> tokens, bool all_logits = false);
  int32_t n_tokens() const { return n_tokens_; }
  void reset() { n_tokens_ = 0; }

 private:
  const LlamaModel& model_;
  int32_t max_tokens_;
  KvStorage kv_;
  std::vector<int32_t> block_table_;  // (n_blocks) identity: logical block i → physical i
  int32_t n_tokens_ = 0;
};

}  // namespace detllm
