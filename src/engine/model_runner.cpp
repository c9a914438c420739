// ModelRunner: StepPlan → forward → logits.
#include "engine/model_runner.h"

namespace detllm::engine {
namespace {
// Pad slots only where decode steps may be padded (step_padding.h's decision needs them).
int32_t pad_slots_for(const LlamaModel& model, GraphMode graphs) {
  const bool pads = graphs == GraphMode::kOn ||
                    (graphs == GraphMode::kAuto && model.ops().graph_capture() != nullptr);
  return pads ? max_pad_rows() : 0;
}
}  // namespace

ModelRunner::ModelRunner(const LlamaModel& model, int32_t n_blocks, int32_t block_size,
                         GraphMode graphs)
    : model_(model), graphs_(graphs),
      kv_(model.ops(), model.config(), n_blocks, block_size, pad_slots_for(model, graphs)) {}

std::span<const float> ModelRunner::run(const StepPlan& plan) {
  for (const BlockCopy& c : plan.copies) kv_.copy_block(c.src, c.dst);
  model_.forward(plan.token_ids, plan.batch(), plan.logit_rows, kv_, logits_, graphs_);
  return logits_;
}

}  // namespace detllm::engine
