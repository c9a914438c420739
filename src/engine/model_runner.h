// ModelRunner: executes a scheduler StepPlan on the model — applies the plan's KV block
// copies, runs one forward over the plan's tokens, and returns the logits of its logit rows.
// It owns the KV memory (plus the pad slots of padded decode steps, model/step_padding.h);
// which block holds what is the scheduler's business.
#pragma once

#include <span>
#include <vector>

#include "engine/scheduler.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"
#include "model/step_padding.h"

namespace detllm::engine {

class ModelRunner {
 public:
  // graphs: how decode steps execute (EngineConfig::cuda_graphs); changes no bit (V8).
  ModelRunner(const LlamaModel& model, int32_t n_blocks, int32_t block_size,
              GraphMode graphs = GraphMode::kAuto);

  // Returns (plan.logit_rows.size(), vocab) logits, valid until the next run().
  std::span<const float> run(const StepPlan& plan);
  const LlamaModel& model() const { return model_; }
  GraphMode graphs() const { return graphs_; }

 private:
  const LlamaModel& model_;
  GraphMode graphs_;
  KvStorage kv_;
  std::vector<float> logits_;
};

}  // namespace detllm::engine
