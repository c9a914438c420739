// EngineStats: what an Engine has done since it was built (steps, tokens, sampling, the
// numerics of its steps, the verified mode's windows and rollbacks, speculative drafts). Read by
// the benchmarks, the server's /metrics and the conformance harness.
#pragma once

#include <cstdint>
#include <vector>

namespace detllm::engine {

struct EngineStats {
  int64_t n_steps = 0;
  int64_t n_requests = 0;
  int64_t n_prompt_tokens = 0;
  int64_t n_generated_tokens = 0;
  int64_t n_computed_tokens = 0;          // tokens run through the model (incl. recompute)
  int64_t n_cached_tokens = 0;            // prompt tokens skipped thanks to the prefix cache
  int64_t n_rows_sampled_on_backend = 0;  // draws made by Ops::sample_rows
  // Logit rows brought to the host: only for prompt logprobs, captured logits, host sampling.
  int64_t n_logit_rows_downloaded = 0;
  // Steps on the invariant numerics and on the fast one (every mode: a step with a
  // deterministic row runs the deterministic numerics, docs/modes.md "Mixed traffic").
  // The verified mode (docs/modes.md): a verification step is an invariant step that verifies
  // at least one window.
  int64_t n_invariant_steps = 0;
  int64_t n_fast_steps = 0;
  int64_t n_deterministic_steps = 0;  // steps holding a row of a deterministic request
  int64_t n_verify_steps = 0;
  int64_t n_verify_windows = 0;      // windows sent to verification
  int64_t n_verify_tokens = 0;       // rows recomputed to verify them (window + 1 each)
  int64_t n_candidate_tokens = 0;    // tokens decoded on the fast numerics (candidates)
  int64_t n_committed_tokens = 0;    // generated tokens of deterministic requests, verified
  int64_t n_rollbacks = 0;           // verifications that found a mismatch
  int64_t n_rolled_back_tokens = 0;  // candidates discarded (at and after a mismatch)
  // Speculative decoding (EngineConfig::speculative; vLLM's spec_decode metrics): drafts
  // proposed, and of them the ones accepted (equal to the token plain decoding drew).
  int64_t n_draft_tokens = 0;
  int64_t n_accepted_draft_tokens = 0;
  int64_t n_drafts = 0;  // windows proposed (a sample's drafts before one step; vLLM's num_drafts)
  // [i]: windows whose draft i (from 0) was accepted — acceptance is a prefix of the window,
  // so this falls with i (vLLM's num_accepted_tokens_per_pos); num_speculative_tokens long.
  std::vector<int64_t> n_accepted_draft_tokens_per_pos;
  int64_t n_draft_windows = 0;  // steps × sequences that scored drafts
  // The draft model's forwards (speculative method draft_model) and the pauses of the
  // adaptive off-switch (SpeculativeConfig::adaptive, draft_policy.h).
  int64_t n_drafter_forwards = 0;
  int64_t n_draft_pauses = 0;
  // Steps that computed a window of drafts as decode rows (ScheduledSeq::decode_rows), and of
  // them the ones padded to a row bucket (a decode step: model/step_padding.h) and the ones
  // replayed from a graph (docs/speculative.md, "Verify steps replay decode graphs").
  int64_t n_window_row_steps = 0;
  int64_t n_window_row_steps_padded = 0;
  int64_t n_window_row_steps_replayed = 0;
  // Adds b's counts to a's, position by position (a grows to b's length).
  static void add_per_pos(std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    if (a.size() < b.size()) a.resize(b.size(), 0);
    for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
  }
  // Share of all computed tokens that were verification recompute.
  double verify_share() const {
    return n_computed_tokens == 0 ? 0.0 : static_cast<double>(n_verify_tokens) / n_computed_tokens;
  }
};

}  // namespace detllm::engine
