// The verdict on speculative tokens (see draft_verdict.h).
#include "engine/draft_verdict.h"

#include <algorithm>

namespace detllm::engine {

int32_t first_verified_position(const Sequence& q, const ScheduledSeq& s) {
  return std::max(s.first_pos + 1, q.n_committed);
}

Verdict apply_verdict(Scheduler& scheduler, const ScheduledSeq& s,
                      std::span<const SampleResult> draws, VerdictSink& sink) {
  const Sequence& q = scheduler.sequence(s.id);
  const int32_t n_tokens = q.n_tokens();
  Verdict verdict;
  size_t d = 0;
  // Row for position t - 1 predicts token t: an uncommitted token while t < n_tokens, else new.
  for (int32_t t = first_verified_position(q, s); t <= s.first_pos + s.n_tokens; ++t) {
    const int32_t row = s.logit_row(t - 1);
    if (t == n_tokens) {
      sink.sample(row, t, draws.subspan(d));
      return verdict;
    }
    const SampleResult& v = draws[d++];
    if (v.none_allowed) {  // a constrained sample whose token rules end it here: drop the rest
      verdict.n_dropped = n_tokens - t;
      scheduler.rollback(s.id, t);
      sink.emit_committed(row, t, v);
      return verdict;
    }
    if (v.token == q.tokens[static_cast<size_t>(t)]) {
      ++verdict.n_accepted;
      scheduler.commit(s.id, t + 1);
      if (sink.emit_committed(row, t, v)) return verdict;
      continue;
    }
    // First mismatch: the draw is committed at t, the tokens from t on are dropped with their
    // KV; decoding resumes from there.
    verdict.mismatch = true;
    verdict.n_dropped = n_tokens - t;
    scheduler.rollback(s.id, t);
    scheduler.append_token(s.id, v.token, /*committed=*/true);
    sink.emit_committed(row, t, v);
    return verdict;
  }
  return verdict;
}

}  // namespace detllm::engine
