// Speculative decoding in the engine (see engine.h, docs/speculative.md): n-gram drafts are put
// after a sample's last committed token before the step is scheduled; after the forward, the
// rows over the last token and the drafts give one draw per position on the request's own
// Philox stream, and the verdict (draft_verdict.h) keeps each draft that equals its draw.
#include <algorithm>

#include "engine/engine.h"
#include "engine/ngram_drafter.h"

namespace detllm::engine {

bool Engine::drafts_for(const Request& req) const {
  return config_.speculative.enabled() && req.speculation && req.max_tokens > 0 && !req.constraint;
}

void Engine::propose_drafts() {
  const SpeculativeConfig& sc = config_.speculative;
  const NgramDrafterConfig ngram{sc.prompt_lookup_min, sc.prompt_lookup_max};
  for (auto& [rid, r] : requests_) {
    // Before the fork the first token is still to draw (n samples draw it from one row).
    if (!r.drafting || !r.forked) continue;
    for (const SampleState& st : r.samples) {
      if (st.done || st.seq < 0) continue;
      const Sequence& q = scheduler_.sequence(st.seq);
      // A plain decode comes next: only the last token, committed, is left to compute.
      if (q.status != SeqStatus::kRunning || q.n_uncomputed() != 1 ||
          q.n_committed != q.n_tokens()) {
        continue;
      }
      // Room for the drafts and the draw after them below max_new_tokens.
      const int32_t k =
          std::min(sc.num_speculative_tokens, q.options.max_new_tokens - q.n_generated() - 1);
      if (k <= 0) continue;
      const std::vector<int32_t> drafts = propose_ngram_drafts(q.tokens, ngram, k);
      if (drafts.empty()) continue;
      scheduler_.append_drafts(st.seq, drafts);
      stats_.n_draft_tokens += static_cast<int64_t>(drafts.size());
    }
  }
}

void Engine::handle_draft_rows(RequestId rid, RequestState& r, int32_t sample_index,
                               const ScheduledSeq& s, std::span<const SampleResult> draws) {
  const Sequence& q = scheduler_.sequence(s.id);
  const int32_t first = first_verified_position(q, s);
  if (first < q.n_tokens() && first <= s.first_pos + s.n_tokens) ++stats_.n_draft_windows;
  Verdict v;
  with_sink(rid, r, sample_index, s,
            [&](VerdictSink& sink) { v = apply_verdict(scheduler_, s, draws, sink); });
  stats_.n_accepted_draft_tokens += v.n_accepted;
}

}  // namespace detllm::engine
