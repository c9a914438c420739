// The serving engine: requests in, token events out. One thread calls add_request/abort/step;
// each step() asks the scheduler for {sequence → n_tokens}, runs the model once over all of
// them (prefill chunks and decode tokens together), samples every sampling row in one batched
// call on the backend (per-token Philox streams; only results leave the device) and applies
// stop rules. Deterministic requests get the same bits whatever else runs (V1–V11).
// In the `verified` mode (LLM-42, docs/modes.md) deterministic requests decode on the fast
// numerics into candidate windows that are verified on the invariant numerics (several
// requests' windows per step) and rolled back at the first mismatch; callbacks see committed
// tokens only — the `invariant` mode's bits.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "engine/engine_config.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"

namespace detllm {
class Tokenizer;
}

namespace detllm::engine {

// Thrown by add_request for a deterministic request while the startup self-check has failed
// (EngineConfig::self_check): the message says what failed and what to do. The server maps it
// to HTTP 503 (code "self_check_failed").
class SelfCheckRefusal : public Error {
 public:
  using Error::Error;
};

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
  // Share of all computed tokens that were verification recompute.
  double verify_share() const {
    return n_computed_tokens == 0 ? 0.0 : static_cast<double>(n_verify_tokens) / n_computed_tokens;
  }
};

// A step as it is about to run (after scheduling, before the forward), for observers that
// record what ran (the conformance harness: batch composition, chunk sizes, page layouts).
// request_of_seq[i] is the request of plan.seqs[i] (-1 for a sequence without one).
struct StepView {
  const StepPlan& plan;
  std::span<const RequestId> request_of_seq;  // (plan seqs)
};
using StepObserver = std::function<void(const StepView&)>;

class Engine {
 public:
  // The model (and its ops) and the tokenizer must outlive the engine. Without a tokenizer,
  // stop strings are refused and there is no EOS token.
  Engine(const LlamaModel& model, const EngineConfig& config, const Tokenizer* tokenizer = nullptr);
  ~Engine();

  // Validates and queues a request; callbacks fire from step(). Throws detllm::Error, and
  // SelfCheckRefusal for a deterministic request when the self-check failed.
  RequestId add_request(Request request, RequestCallbacks callbacks);
  // Cancels a request: its sequences free their KV, on_finish(kAbort) fires for live samples.
  void abort(RequestId id);
  // Runs one step; false when there was nothing to run.
  bool step();
  void run_until_idle() {
    while (step()) {
    }
  }
  bool has_work() const { return !requests_.empty(); }
  // kUnknown once the request has finished or was never added.
  RequestStatus status(RequestId id) const;
  int32_t n_requests() const { return static_cast<int32_t>(requests_.size()); }

  const EngineConfig& config() const { return config_; }
  const Scheduler& scheduler() const { return scheduler_; }
  const EngineStats& stats() const { return stats_; }
  // Called by every step() that runs, before its forward; one observer (none by default).
  void set_step_observer(StepObserver observer) { step_observer_ = std::move(observer); }
  bool is_deterministic(const Request& r) const {
    return r.deterministic.value_or(config_.policy.deterministic_by_default);
  }
  // False when the startup self-check failed: deterministic requests are refused.
  bool deterministic_allowed() const { return !config_.self_check.refuses_deterministic(); }

 private:
  struct SampleState {
    SeqId seq = -1;
    bool done = false;
    std::vector<int32_t> generated;
  };
  struct RequestState {
    Request req;
    RequestCallbacks cb;
    std::vector<SampleState> samples;  // (n)
    bool forked = false;
    bool speculative = false;  // verified mode, deterministic: candidates + verification
    bool prompt_logprobs_sent = false;
    std::vector<PromptLogprob> prompt_logprobs;  // (n_prompt - 1) for positions 1…
    std::vector<bool> prompt_logprob_filled;
    int32_t cached_tokens = 0;
    int32_t n_live = 0;
  };

  // The draws of one step: one per (sampling row, sample index), in plan order.
  struct StepDraws {
    std::vector<int32_t> begin;           // (plan seqs + 1) seq i's draws: [begin[i], begin[i+1])
    std::vector<int32_t> rows;            // (draws) logit row
    std::vector<SampleRowParams> params;  // (draws)
    std::vector<SampleRowResult> row_results;  // (draws) backend sampling
    std::vector<SampleResult> results;         // (draws)
  };
  // Plans the step's draws (the n samples of a prompt draw from its last row) and makes them:
  // one Ops::sample_rows call, or sample() on host logits when config_.host_sampling.
  void draw_samples(const StepPlan& plan);
  // Number of the scheduled rows of s whose logits score a prompt token (prompt logprobs).
  int32_t n_prompt_rows(const RequestState& r, const ScheduledSeq& s) const;
  void handle_prompt_rows(RequestState& r, const ScheduledSeq& s);
  void handle_sample(RequestId rid, RequestState& r, int32_t sample_index, int32_t row,
                     int32_t position, std::span<const SampleResult> draws);
  // ---- verified mode ----
  bool verified() const { return config_.policy.mode == DeterminismMode::kVerified; }
  // Releases ready windows for verification when their group is complete (VerifyConfig).
  // force: release the oldest group now (nothing else is left to schedule).
  void launch_verification(bool force);
  // How a step runs. Not verified: the deterministic numerics when a row belongs to a
  // deterministic request, the others' numerics otherwise; fixed_shape when a row belongs to
  // an isolated (padded-mode) sequence — a decode step then runs at decode_fixed_rows rows.
  struct StepClass {
    NumericsMode numerics = NumericsMode::kInvariant;
    bool fixed_shape = false;
    bool deterministic = false;  // a row of a deterministic request
  };
  StepClass step_class(const StepPlan& plan) const;
  // Verified: invariant when a speculative sequence computes prompt, recompute or
  // verification rows over trusted KV; fast otherwise.
  NumericsMode verified_step_numerics(const StepPlan& plan) const;
  // A speculative sequence's chunk that ran on the invariant numerics over trusted KV: its
  // rows verify candidates in order (commit on match; at the first mismatch the verifier's
  // token replaces the candidate and the rest is rolled back), then sample the next token.
  void handle_verified_rows(RequestId rid, RequestState& r, int32_t sample_index,
                            const ScheduledSeq& s, std::span<const SampleResult> draws);
  // A candidate from a fast row: appended uncommitted; a full window is held for its group.
  void handle_candidate(RequestState& r, int32_t sample_index, const SampleResult& draw);
  // Emits one committed token (callbacks, stop rules); true when the sample finished.
  bool emit_committed(RequestId rid, RequestState& r, int32_t sample_index, int32_t row,
                      int32_t position, const SampleResult& res);
  void unpark(SeqId seq);
  FinishReason stop_reason(const RequestState& r, const SampleState& s, int32_t token) const;
  void finish_sample(RequestId rid, RequestState& r, int32_t sample_index, FinishReason reason);

  const LlamaModel& model_;
  EngineConfig config_;
  const Tokenizer* tokenizer_;
  std::vector<int32_t> eos_ids_;
  Scheduler scheduler_;
  ModelRunner runner_;
  std::unordered_map<RequestId, RequestState> requests_;
  std::unordered_map<SeqId, std::pair<RequestId, int32_t>> seq_owner_;  // → (request, sample)
  RequestId next_id_ = 0;
  EngineStats stats_;
  StepDraws draws_;  // reused across steps
  StepObserver step_observer_;
  std::vector<RequestId> request_of_seq_;  // the observer's view, reused across steps
  struct Parked {
    SeqId seq;
    int64_t since_step;
  };
  std::vector<Parked> parked_;  // ready windows waiting for their verification group
};

}  // namespace detllm::engine
