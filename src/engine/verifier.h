// The `verified` mode's bookkeeping (LLM-42, docs/modes.md): deterministic sequences decode on
// the fast numerics into candidate windows; a full window is parked until its verification
// group is complete, then rewound so that the scheduler recomputes its inputs on the invariant
// numerics; the verdict commits the matching candidates and rolls back at the first mismatch.
// The Engine owns one Verifier in the verified mode (none otherwise) and calls its hooks at
// fixed points of Engine::step; the scheduler keeps only the token bookkeeping any speculative
// scheme needs (SequenceOptions::speculative: commit, rollback, rewind, hold), and the verdict
// itself is engine/draft_verdict.h, shared with the n-gram drafts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "determinism/policy.h"
#include "engine/draft_verdict.h"
#include "engine/engine_config.h"
#include "engine/engine_stats.h"
#include "engine/scheduler.h"
#include "kernels/sampling/sampler.h"

namespace detllm::engine {

class Verifier {
 public:
  // scheduler and stats (verification counters) must outlive the verifier.
  Verifier(const VerifyConfig& config, Scheduler& scheduler, EngineStats& stats);

  // ---- before schedule() ----
  // Releases ready windows for verification (rewinds them) when their group is complete
  // (VerifyConfig). force: release the oldest group now (nothing else is left to schedule).
  void release_groups(bool force);
  bool has_parked() const { return !parked_.empty(); }
  // The sequence left (preempted: its candidates are dropped; finished; aborted): its window,
  // if parked, is forgotten.
  void forget(SeqId seq);

  // ---- how the step runs ----
  // Invariant when a speculative sequence computes prompt, recompute or verification rows over
  // trusted KV; fast otherwise (only the decode of the last committed token may run fast).
  NumericsMode step_numerics(const StepPlan& plan) const;
  // The plan verifies at least one window (EngineStats::n_verify_steps).
  bool verifies_window(const StepPlan& plan) const;

  // ---- after the forward, per scheduled speculative sequence (one that draws tokens) ----
  // Its rows ran over trusted KV (the invariant numerics): they verify the candidates from
  // first_verified_position (draft_verdict.h) on, then sample the next token. Otherwise, a
  // sampled row is a fast decode whose token becomes a candidate (add_candidate).
  bool verifies_rows(const ScheduledSeq& s) const;
  // Applies the verdict of draws (one per position from first_verified_position, the last
  // position's being the sampling row's): candidates that equal their draw are committed in
  // order; at the first mismatch the draw replaces the candidate and the rest is rolled back.
  void verify_rows(const ScheduledSeq& s, std::span<const SampleResult> draws, VerdictSink& sink);
  // Appends a candidate from a fast row; true when its window is full (VerifyConfig::window
  // candidates, or max_new_tokens reached): park it then.
  bool add_candidate(SeqId seq, int32_t token);
  // The candidates of seq, after its committed tokens (for a stop rule on them).
  std::span<const int32_t> candidates(SeqId seq) const;
  // Holds seq's window (not scheduled) until its group is released.
  void park(SeqId seq);

 private:
  struct Parked {
    SeqId seq;
    int64_t since_step;
  };
  // Rows a released window recomputes: its inputs from the last committed token.
  int32_t window_rows(SeqId seq) const;
  // A deterministic sequence is still producing candidates (not held).
  bool any_decoding() const;

  VerifyConfig config_;
  Scheduler& scheduler_;
  EngineStats& stats_;
  std::vector<Parked> parked_;  // ready windows waiting for their verification group, oldest first
};

}  // namespace detllm::engine
