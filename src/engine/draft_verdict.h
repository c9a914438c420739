// The verdict on speculative tokens, shared by every speculative scheme of the engine: the
// `verified` mode's candidate windows (engine/verifier.h) and the n-gram drafts
// (engine_speculation.cpp). A speculative sequence (SequenceOptions::speculative) holds
// uncommitted tokens after its committed ones; rows computed on the request's own numerics
// over them give one draw per position (same Philox stream as plain decoding: seed, position,
// sample index). Each token that equals its draw is committed in order; at the first mismatch
// the draw replaces it and the rest is rolled back with its KV (Scheduler::rollback).
//
//   tokens  [ … committed … c | d1 d2 d3 ]      rows  c  d1 d2 d3
//   draws                        v1 v2 v3 v4           ↓  ↓  ↓  ↓
//   d1 == v1, d2 != v2:  commit d1, roll back to d2's position, commit v2; d3 and v3, v4 dropped
//   all equal:           commit d1 d2 d3, then v4 is the next sampled token (VerdictSink::sample)
#pragma once

#include <cstdint>
#include <span>

#include "engine/scheduler.h"
#include "kernels/sampling/sampler.h"

namespace detllm::engine {

// Where the verdict's tokens go: the engine's emission (callbacks, stop rules, finish).
class VerdictSink {
 public:
  // A committed token at `position` (logits in `row`): a verified candidate or, at a mismatch,
  // the draw itself. True when it finished the sample (nothing more may follow).
  virtual bool emit_committed(int32_t row, int32_t position, const SampleResult& draw) = 0;
  // Every candidate matched and the rows reached the end of the sequence: the sampling row's
  // draws (one per sample before the fork, as for any sampled row).
  virtual void sample(int32_t row, int32_t position, std::span<const SampleResult> draws) = 0;

 protected:
  ~VerdictSink() = default;
};

struct Verdict {
  int32_t n_accepted = 0;  // uncommitted tokens that equalled their draw (committed)
  bool mismatch = false;   // a token differed from its draw (replaced by it)
  int32_t n_dropped = 0;   // uncommitted tokens discarded (at and after the mismatch)
};

// The first position whose token the rows of s predict (an uncommitted token or the next
// one): each position from here to s.first_pos + s.n_tokens gets a draw from the row before.
int32_t first_verified_position(const Sequence& q, const ScheduledSeq& s);

// Applies the verdict of `draws` (one per position from first_verified_position on, the last
// position's being the sampling row's when s reaches the end of the sequence) to the
// speculative sequence s.id: commits, rolls back, emits through `sink`. After the forward and
// complete_step(); the sequence may be gone when it returns (the sink finished it).
Verdict apply_verdict(Scheduler& scheduler, const ScheduledSeq& s,
                      std::span<const SampleResult> draws, VerdictSink& sink);

}  // namespace detllm::engine
