// The verified mode's windows, groups, verdicts and rollback (see verifier.h, docs/modes.md).
#include "engine/verifier.h"

#include <algorithm>

#include "core/error.h"

namespace detllm::engine {

Verifier::Verifier(const VerifyConfig& config, Scheduler& scheduler, EngineStats& stats)
    : config_(config), scheduler_(scheduler), stats_(stats) {}

int32_t Verifier::window_rows(SeqId seq) const {
  const Sequence& q = scheduler_.sequence(seq);
  return q.n_tokens() - q.n_trusted;
}

bool Verifier::any_decoding() const {
  // Every live sequence is running or waiting; a held one is running.
  for (const SeqId id : scheduler_.running()) {
    const Sequence& q = scheduler_.sequence(id);
    if (q.options.speculative && !q.options.drafted && !q.held) return true;
  }
  for (const SeqId id : scheduler_.waiting()) {
    const Sequence& q = scheduler_.sequence(id);
    if (q.options.speculative && !q.options.drafted) return true;
  }
  return false;
}

void Verifier::release_groups(bool force) {
  if (parked_.empty()) return;
  int64_t ready_rows = 0;
  for (const Parked& p : parked_) ready_rows += window_rows(p.seq);
  const bool go = force || !any_decoding() ||
                  static_cast<int32_t>(parked_.size()) >= config_.group_min_requests ||
                  ready_rows >= config_.group_tokens ||
                  stats_.n_steps - parked_.front().since_step >= config_.max_wait_steps;
  if (!go) return;
  // One group: oldest windows first, up to group_tokens rows and group_max_requests windows.
  size_t n = 0;
  int64_t rows = 0;
  while (n < parked_.size() && static_cast<int32_t>(n) < config_.group_max_requests) {
    const int32_t w = window_rows(parked_[n].seq);
    if (n > 0 && rows + w > config_.group_tokens) break;
    rows += w;
    scheduler_.rewind(parked_[n].seq);
    ++stats_.n_verify_windows;
    stats_.n_verify_tokens += w;
    ++n;
  }
  parked_.erase(parked_.begin(), parked_.begin() + static_cast<ptrdiff_t>(n));
}

void Verifier::forget(SeqId seq) {
  std::erase_if(parked_, [seq](const Parked& p) { return p.seq == seq; });
}

NumericsMode Verifier::step_numerics(const StepPlan& plan) const {
  for (const ScheduledSeq& s : plan.seqs) {
    const Sequence& q = scheduler_.sequence(s.id);
    // Drafted sequences' numerics are the engine's (Engine::step_class).
    if (!q.options.speculative || q.options.drafted || s.first_pos != q.n_trusted) continue;
    // Over trusted KV. Only the decode of the last committed token may run fast (its token
    // becomes a candidate); prompt, recompute and verification rows need the invariant path.
    const bool plain_decode = s.n_tokens == 1 && s.first_pos == q.n_tokens() - 1 &&
                              q.n_committed == q.n_tokens() && s.first_pos >= q.n_prompt;
    if (!plain_decode) return NumericsMode::kInvariant;
  }
  return NumericsMode::kFast;
}

bool Verifier::verifies_window(const StepPlan& plan) const {
  return std::any_of(plan.seqs.begin(), plan.seqs.end(), [&](const ScheduledSeq& s) {
    const Sequence& q = scheduler_.sequence(s.id);
    return q.options.speculative && !q.options.drafted && s.first_pos == q.n_trusted &&
           q.n_committed < q.n_tokens();
  });
}

bool Verifier::verifies_rows(const ScheduledSeq& s) const {
  return scheduler_.sequence(s.id).n_trusted >= s.first_pos + s.n_tokens;
}

void Verifier::verify_rows(const ScheduledSeq& s, std::span<const SampleResult> draws,
                           VerdictSink& sink) {
  const Verdict v = apply_verdict(scheduler_, s, draws, sink);
  if (v.mismatch) {
    ++stats_.n_rollbacks;
    stats_.n_rolled_back_tokens += v.n_dropped;
  }
}

bool Verifier::add_candidate(SeqId seq, int32_t token) {
  scheduler_.append_token(seq, token, /*committed=*/false);
  ++stats_.n_candidate_tokens;
  const Sequence& q = scheduler_.sequence(seq);
  return q.n_tokens() - q.n_committed >= config_.window ||
         q.n_generated() >= q.options.max_new_tokens;
}

std::span<const int32_t> Verifier::candidates(SeqId seq) const {
  const Sequence& q = scheduler_.sequence(seq);
  return std::span<const int32_t>(q.tokens).subspan(static_cast<size_t>(q.n_committed));
}

void Verifier::park(SeqId seq) {
  scheduler_.set_held(seq, true);
  parked_.push_back({seq, stats_.n_steps});
}

}  // namespace detllm::engine
