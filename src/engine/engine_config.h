// EngineConfig: every engine setting in one validated struct — scheduling and KV cache
// (SchedulerConfig), context limit, the determinism policy, and the startup self-check's
// verdict (which gates deterministic requests). Built once, passed by const&.
#pragma once

#include <cstdint>

#include "determinism/policy.h"
#include "determinism/self_check.h"
#include "engine/scheduler.h"
#include "model/step_padding.h"

namespace detllm {
struct ModelConfig;
}

namespace detllm::engine {

struct EngineConfig {
  SchedulerConfig scheduler;  // kv.n_blocks == 0: derived from kv_cache_tokens
  int32_t kv_cache_tokens = 8192;  // KV pool capacity in tokens when kv.n_blocks == 0
  int32_t max_model_len = 0;       // longest prompt + output; 0 = the model's context
  DeterminismPolicy policy;
  // Decode steps padded to batch-size buckets and replayed as CUDA graphs (auto: where the
  // backend has graphs). An execution setting, not a numerics one: it changes no bit (V8).
  GraphMode cuda_graphs = GraphMode::kAuto;
  // The startup self-check's outcome (design.md Rule 3), set by whoever ran run_self_check on
  // the model's ops before building the engine (detllm serve / generate). kFailed: add_request
  // refuses deterministic requests. kNotRun (library use, tests) gates nothing; resolved()
  // makes it kDisabled when policy.self_check is off.
  SelfCheckVerdict self_check;

  // Fills derived fields (n_blocks, max_model_len) for `model` and validates everything.
  // Throws detllm::Error naming the bad setting.
  EngineConfig resolved(const ModelConfig& model) const;
};

}  // namespace detllm::engine
