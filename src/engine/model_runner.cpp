// ModelRunner: StepPlan → forward → logits.
#include "engine/model_runner.h"

namespace detllm::engine {

ModelRunner::ModelRunner(const LlamaModel& model, int32_t n_blocks, int32_t block_size)
    : model_(model), kv_(model.ops(), model.config(), n_blocks, block_size) {}

std::span<const float> ModelRunner::run(const StepPlan& plan) {
  for (const BlockCopy& c : plan.copies) kv_.copy_block(c.src, c.dst);
  model_.forward(plan.token_ids, plan.batch(), plan.logit_rows, kv_, logits_);
  return logits_;
}

}  // namespace detllm::engine
