// One sequence as the scheduler sees it: its tokens (prompt, then generated), how many of them
// have KV in the cache, and its scheduling state. No device data, no sampling state: the engine
// keeps the request (sampling params, stop rules) and refers to the sequence by SeqId.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace detllm::engine {

// Assigned by the Scheduler, increasing from 0, never reused.
using SeqId = int64_t;

enum class SeqStatus : uint8_t {
  kWaiting,  // queued; holds no KV blocks
  kRunning,  // admitted; holds a block table covering its computed tokens
};

std::string_view seq_status_name(SeqStatus s);

// What a sequence asks of the scheduler, fixed when it is added.
struct SequenceOptions {
  // Tokens the engine may append after the prompt. prompt + max_new_tokens must fit in the KV
  // pool, so that a sequence running alone can always finish (no livelock); append_token()
  // beyond it is an error.
  int32_t max_new_tokens = 0;
  // Scoring / prompt logprobs: the logits of every computed position are needed, so cached
  // prefix tokens are never skipped for this sequence (it still publishes its own blocks).
  bool all_logits = false;
  // Part of every block key (design.md Rule 4): KV computed under different numerics (mode,
  // kernel family, dtype) is never shared. The engine derives it from the numerics policy.
  uint64_t numerics_class = 0;
  // The `verified` mode's deterministic sequences: tokens past n_committed are candidates
  // (decoded on the fast numerics, not yet verified) and KV past n_trusted was computed on
  // the fast numerics or from candidates. Only trusted KV enters the prefix cache; a
  // preemption drops the candidates. See Sequence::n_committed. N-gram speculation
  // (engine/speculation.h) marks its sequences so too: its candidates are drafts.
  bool speculative = false;
  // Speculative decoding (engine_speculation.cpp): the uncommitted tokens are a drafter's
  // proposals, not the verified mode's fast candidates. In the verified mode such a sequence is
  // never parked: its rows — the last committed token and the drafts — are verified in the step
  // that computes them (Engine::step_class puts a deterministic one on the invariant numerics).
  // In the padded mode an isolated one verifies its window as decode rows (scheduler.h).
  bool drafted = false;
  // The `padded` mode's deterministic sequences (CoRun, determinism/modes.h): the prefill runs
  // alone and whole, decode rows only in decode-only steps, never a prefix-cache hit (see
  // scheduler.h, "Isolated sequences"). The other sequences are scheduled as usual around them.
  bool isolated = false;
};

struct Sequence {
  SeqId id = -1;
  std::vector<int32_t> tokens;  // (n_tokens) prompt tokens, then generated ones
  int32_t n_prompt = 0;         // leading tokens that are the prompt
  // Leading tokens whose KV is in the cache (the runner has computed them). Positions
  // [n_computed, n_tokens) are still to compute; preemption resets it to 0.
  int32_t n_computed = 0;
  // Tokens scheduled in the plan now in flight (between schedule() and mark_computed()).
  int32_t n_in_flight = 0;
  SequenceOptions options;
  SeqStatus status = SeqStatus::kWaiting;
  int32_t n_cached_tokens = 0;  // prefix-cache hit at the last admission
  int32_t n_preemptions = 0;
  // Speculative sequences only (options.speculative; otherwise unused):
  //   tokens   [ prompt | committed generated | candidates ]
  //            0        n_prompt              n_committed   n_tokens
  //   KV       [ trusted (invariant numerics over committed tokens) | untrusted ]
  //            0                                                    n_trusted <= n_computed
  // Between steps n_trusted <= n_committed - 1 while candidates exist.
  int32_t n_committed = 0;
  int32_t n_trusted = 0;
  // A full window waiting for its verification group: not scheduled until released.
  bool held = false;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t n_generated() const { return n_tokens() - n_prompt; }
  int32_t n_uncomputed() const { return n_tokens() - n_computed; }
  // Most tokens this sequence can ever hold: the KV it may need at most.
  int32_t max_tokens() const { return n_prompt + options.max_new_tokens; }
};

}  // namespace detllm::engine
