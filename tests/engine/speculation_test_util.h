// Shared by the speculation tests (speculation_test.cpp, draft_model_test.cpp).
#pragma once

#include "engine/engine.h"

namespace detllm::engine::testing {

// Steps `engine` until it is idle, checking the scheduler after every step, and aborts `victim`
// (sequence 0) the first time a step ends with its drafts still unverified: a window verified
// over several steps (the scheduler's chunks). Returns whether that happened.
inline bool abort_mid_window(Engine& engine, RequestId victim) {
  bool aborted = false;
  while (engine.step()) {
    engine.scheduler().check_consistency();
    if (aborted) continue;
    for (const SeqId id : engine.scheduler().running()) {
      const Sequence& q = engine.scheduler().sequence(id);
      if (id == 0 && q.n_committed < q.n_tokens()) {
        engine.abort(victim);
        aborted = true;
        break;
      }
    }
  }
  return aborted;
}

}  // namespace detllm::engine::testing
