// EngineConfig: every engine setting in one validated struct — scheduling and KV cache
// (SchedulerConfig), context limit, and the determinism policy. Built once, passed by const&.
#pragma once

#include <cstdint>

#include "determinism/policy.h"
#include "engine/scheduler.h"

namespace detllm {
struct ModelConfig;
}

namespace detllm::engine {

struct EngineConfig {
  SchedulerConfig scheduler;  // kv.n_blocks == 0: derived from kv_cache_tokens
  int32_t kv_cache_tokens = 8192;  // KV pool capacity in tokens when kv.n_blocks == 0
  int32_t max_model_len = 0;       // longest prompt + output; 0 = the model's context
  DeterminismPolicy policy;

  // Fills derived fields (n_blocks, max_model_len) for `model` and validates everything.
  // Throws detllm::Error naming the bad setting.
  EngineConfig resolved(const ModelConfig& model) const;
};

}  // namespace detllm::engine
