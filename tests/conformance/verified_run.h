// A driver for verified-mode tests (CPU: tests/conformance/verified_mode_test.cpp; GPU:
// tests/cuda/cuda_verified_mode_test.cpp): runs a workload through an Engine on a given model
// under a determinism mode and records every request's trace (conformance::RequestTrace:
// tokens, logprobs, fp32 logits per output position, prompt logprobs, finish) plus the engine's
// statistics (rollbacks, verification steps…) — the conformance harness's run() on a shared
// model, under the mode's engine configuration.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "determinism/modes.h"
#include "engine/engine.h"
#include "model/llama_model.h"
#include "verify/conformance.h"

namespace detllm::conformance {

struct Outcome {  // what one run of a workload gave
  std::vector<RequestTrace> traces;
  engine::EngineStats stats;
  int64_t preemptions = 0;
  int64_t cached_tokens = 0;  // of the traced workload (after the warm-up)
};

// Runs `reqs` (capture_logits on) to completion under `mode` (apply_mode on `ec`) on `model`,
// after running `warmup` (untraced); requests arrive before step arrival[i] ({}: all at once).
// Checks the scheduler's accounting after every step and that no KV block leaked.
inline Outcome run_verified_workload(LlamaModel& model, DeterminismMode mode,
                                     engine::EngineConfig ec,
                                     const std::vector<engine::Request>& reqs,
                                     const std::vector<engine::Request>& warmup = {},
                                     const std::vector<int32_t>& arrival = {}) {
  apply_mode(mode, ec);
  Target target;
  target.name = std::string(determinism_mode_name(mode));
  target.config = &model.config();
  target.shared_model = [&model]() -> LlamaModel& { return model; };
  target.policy = ec.policy;  // the harness runs the Target's policy
  Execution exec;
  exec.label = target.name;
  exec.engine = ec;
  exec.warmup = warmup;
  exec.arrival = arrival;
  RunResult r = run(target, exec, reqs);
  Outcome out;
  out.traces = std::move(r.traces);
  out.stats = r.engine_stats;
  out.preemptions = r.n_preemptions;
  out.cached_tokens = r.n_cached_tokens;
  return out;
}

inline void print_verified_stats(const std::string& label, const Outcome& o) {
  const engine::EngineStats& s = o.stats;
  std::printf(
      "[verified] %-28s steps %lld (invariant %lld, fast %lld, verify %lld) windows %lld "
      "rollbacks %lld candidates %lld committed %lld rolled back %lld verify tokens %lld "
      "(%.1f%% of %lld computed) preemptions %lld cached %lld\n",
      label.c_str(), static_cast<long long>(s.n_steps), static_cast<long long>(s.n_invariant_steps),
      static_cast<long long>(s.n_fast_steps), static_cast<long long>(s.n_verify_steps),
      static_cast<long long>(s.n_verify_windows), static_cast<long long>(s.n_rollbacks),
      static_cast<long long>(s.n_candidate_tokens), static_cast<long long>(s.n_committed_tokens),
      static_cast<long long>(s.n_rolled_back_tokens), static_cast<long long>(s.n_verify_tokens),
      100.0 * s.verify_share(), static_cast<long long>(s.n_computed_tokens),
      static_cast<long long>(o.preemptions), static_cast<long long>(o.cached_tokens));
}

}  // namespace detllm::conformance
