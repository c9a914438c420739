// A driver for verified-mode tests (CPU: tests/conformance/verified_mode_test.cpp; GPU:
// tests/cuda/cuda_verified_mode_test.cpp): runs a workload through an Engine on a given model
// under a determinism mode and records every request's trace (conformance::RequestTrace:
// tokens, logprobs, fp32 logits per output position, prompt logprobs, finish) plus the engine's
// statistics (rollbacks, verification steps…), which the conformance harness does not report.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "determinism/conformance.h"
#include "determinism/modes.h"
#include "engine/engine.h"
#include "model/llama_model.h"

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
  engine::Engine eng(model, ec);
  for (const auto& w : warmup) eng.add_request(w, {});
  eng.run_until_idle();
  const int64_t warm_cached = eng.stats().n_cached_tokens;

  Outcome out;
  out.traces.resize(reqs.size());
  size_t n_added = 0;
  std::vector<bool> added(reqs.size(), false);
  auto add = [&](size_t i) {
    engine::Request r = reqs[i];
    r.capture_logits = true;
    RequestTrace& t = out.traces[i];
    t.tokens.assign(r.n, {});
    t.logprobs.assign(r.n, {});
    t.finish.assign(r.n, engine::FinishReason::kNone);
    t.cached_tokens.assign(r.n, 0);
    engine::RequestCallbacks cb;
    cb.on_token = [&t](const engine::TokenEvent& e) {
      t.tokens[e.sample_index].push_back(e.token);
      t.logprobs[e.sample_index].push_back(e.logprob);
    };
    cb.on_logits = [&t](int32_t sample, int32_t pos, std::span<const float> logits) {
      auto [it, inserted] = t.logits.try_emplace({sample, pos}, logits.begin(), logits.end());
      check(inserted || std::memcmp(it->second.data(), logits.data(), logits.size_bytes()) == 0,
            "logits of sample {} position {} changed when emitted again", sample, pos);
    };
    cb.on_prompt_logprobs = [&t](std::span<const engine::PromptLogprob> lp) {
      t.prompt_logprobs.assign(lp.begin(), lp.end());
    };
    cb.on_finish = [&t](int32_t sample, engine::FinishReason reason, const engine::Usage& u) {
      t.finish[sample] = reason;
      t.cached_tokens[sample] = u.cached_tokens;
    };
    eng.add_request(std::move(r), std::move(cb));
    added[i] = true;
    ++n_added;
  };
  for (int64_t step = 0;; ++step) {
    check(step < 100000, "the workload did not finish");
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (!added[i] && (arrival.empty() || arrival[i] <= step)) add(i);
    }
    const bool ran = eng.step();
    eng.scheduler().check_consistency();
    if (n_added == reqs.size() && !eng.has_work()) break;
    check(ran || n_added < reqs.size(), "the engine stalled with work left");
  }
  const engine::KvCacheStats kv = eng.scheduler().kv_cache().stats();
  check(kv.n_referenced == 0 && kv.n_free + kv.n_cached_idle == kv.n_blocks, "KV blocks leaked");
  out.stats = eng.stats();
  out.preemptions = eng.scheduler().stats().n_preemptions;
  out.cached_tokens = eng.stats().n_cached_tokens - warm_cached;
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
