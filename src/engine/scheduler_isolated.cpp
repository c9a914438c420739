// The `padded` mode's scheduling (CoRun, determinism/modes.h): while an isolated sequence is
// live, a step is one isolated sequence's whole prefill alone, a step of the other sequences
// only, or a decode step — so an isolated sequence's rows never share a step with a prefill.
// The policy is written in scheduler.h ("Isolated sequences"); schedule() comes here when
// n_isolated_ > 0 and to schedule_batched (scheduler.cpp) otherwise.
#include <algorithm>
#include <utility>
#include <vector>

#include "core/error.h"
#include "engine/scheduler.h"

namespace detllm::engine {

void Scheduler::schedule_isolated(StepPlan& plan, std::vector<std::pair<SeqId, int32_t>>& picks) {
  const auto max_seqs = static_cast<size_t>(config_.max_seqs);
  // 1. A running sequence with several tokens left (a prefill cut short by mark_computed): an
  // isolated one runs alone, whole, preempting the newest sequences if its blocks do not fit;
  // another one makes this a step of the other sequences.
  for (size_t i = 0; i < running_.size(); ++i) {
    const SeqId id = running_[i];
    Sequence& s = seq(id);
    const int32_t want = s.n_uncomputed();
    if (want <= 1 || s.held || is_decode_window(s)) continue;
    if (!s.options.isolated) {
      schedule_batched(plan, picks, /*others_only=*/true);
      if (!picks.empty()) return;
      break;  // it was preempted: decode what is left
    }
    while (kv_.max_tokens_fitting(id, s.n_computed, want) < want) {
      const bool self = running_.back() == id;
      preempt_last_running(plan);
      if (self) return;  // back to waiting: admitted alone below, in a later step
    }
    check(kv_.ensure_writable(id, s.n_computed, want, plan.copies),
          "scheduler: internal error: blocks for sequence {} vanished", id);
    picks.emplace_back(id, want);
    return;
  }
  // 2. The waiting head, if a sequence slot is free and its first chunk fits: an isolated one
  // is admitted alone and whole; another one starts a step of the other sequences (batched,
  // chunked, the prefix cache used). Else the decode step below.
  if (plan.preempted.empty() && !waiting_.empty() && running_.size() < max_seqs) {
    const SeqId id = waiting_.front();
    const Sequence& s = sequence(id);
    const PrefixMatch match = prefix_match(s);
    int32_t want = s.n_tokens() - match.n_tokens;
    if (!s.options.isolated) want = chunk_limit(want, config_.max_tokens_per_step);
    if (head_fits(match, want)) {
      if (s.options.isolated) {
        admit(id, match, want, plan, picks);
        return;
      }
      schedule_batched(plan, picks, /*others_only=*/true);
      if (!picks.empty()) return;
    }
  }
  // 3. A decode step: every running sequence with one token to compute, oldest first, under
  // the budget and max_seqs; the newest are preempted when KV runs out (as in schedule()).
  int32_t budget = config_.max_tokens_per_step;
  for (size_t i = 0; i < running_.size() && budget > 0 && picks.size() < max_seqs; ++i) {
    const SeqId id = running_[i];
    Sequence& s = seq(id);
    if (s.n_uncomputed() == 0 || s.held) continue;  // waiting for append_token() or finish()
    bool self_preempted = false;
    while (kv_.max_tokens_fitting(id, s.n_computed, 1) == 0) {
      self_preempted = running_.back() == id;
      preempt_last_running(plan);
      if (self_preempted) break;
    }
    if (self_preempted) break;
    check(kv_.ensure_writable(id, s.n_computed, 1, plan.copies),
          "scheduler: internal error: blocks for sequence {} vanished", id);
    picks.emplace_back(id, 1);
    --budget;
  }
  // 4. The rows left up to max_seqs (the fixed decode shape) go to draft windows, oldest
  // first, as far as their blocks fit without preempting anyone; the rest of a window waits.
  auto rows_left = static_cast<int32_t>(max_seqs - picks.size());
  for (auto& [id, n] : picks) {
    if (rows_left <= 0 || budget <= 0) break;
    Sequence& s = seq(id);
    if (!is_decode_window(s)) continue;
    const int32_t want = std::min({s.n_uncomputed(), n + rows_left, n + budget});
    const int32_t fit = kv_.max_tokens_fitting(id, s.n_computed, want);
    if (fit <= n) continue;
    check(kv_.ensure_writable(id, s.n_computed, fit, plan.copies),
          "scheduler: internal error: blocks for sequence {} vanished", id);
    rows_left -= fit - n;
    budget -= fit - n;
    n = fit;
  }
}

bool Scheduler::is_decode_window(const Sequence& s) const {
  return s.options.drafted && (s.options.isolated || config_.windows_as_decode_rows) &&
         s.n_uncomputed() > 1 && s.n_computed + 1 >= s.n_committed;
}

}  // namespace detllm::engine
