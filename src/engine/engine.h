// The serving engine: requests in, token events out. One thread calls add_request/abort/step;
// each step() asks the scheduler for {sequence → n_tokens}, runs the model once over all of
// them (prefill chunks and decode tokens together), samples every sampling row in one batched
// call on the backend (per-token Philox streams; only results leave the device) and applies
// stop rules. Deterministic requests get the same bits whatever else runs (V1–V11).
// Every mode runs the same step; what a mode changes sits behind two hooks:
//   step_class()  the step's GEMM numerics and decode shape (`padded`: the fixed shape; the
//                 scheduler isolates its deterministic sequences, scheduler_isolated.cpp)
//   verifier_     `verified` only (LLM-42, engine/verifier.h): deterministic requests decode
//                 on the fast numerics into candidate windows verified on the invariant
//                 numerics and rolled back at the first mismatch; callbacks see committed
//                 tokens only — the `invariant` mode's bits.
// Speculative decoding (EngineConfig::speculative, engine_speculation.cpp): a drafter (n-gram
// lookup, or a draft model on its own KV cache) proposes tokens before a decode step; the step
// computes them with the last token and each is kept only where it equals the token plain decoding
// draws there (draft_verdict.h), so the output is the same bits as without speculation
// (docs/speculative.md).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "engine/draft_model_drafter.h"
#include "engine/draft_policy.h"
#include "engine/engine_config.h"
#include "engine/engine_stats.h"
#include "engine/grammar_cursor.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/verifier.h"
#include "kernels/sampling/masked_sample.h"

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
  // stop strings are refused and there is no EOS token. draft_model: the drafter of
  // speculative method draft_model (required there, refused otherwise); it must outlive the
  // engine and have the model's vocabulary and at least max_model_len of context.
  Engine(const LlamaModel& model, const EngineConfig& config, const Tokenizer* tokenizer = nullptr,
         const LlamaModel* draft_model = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;  // the verifier refers to the scheduler and the stats
  Engine& operator=(const Engine&) = delete;

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

  // Before serving (no request yet): one padded decode step of every shape the engine's decode
  // steps can take — row buckets up to max_seqs × block-table widths up to max_model_len,
  // shortest contexts first, at most kMaxStepGraphs / 2 graphs — under every GEMM numerics its
  // steps use, on the KV pad slots (model/decode_warmup.h). On a backend with graphs each one
  // is captured now instead of in a request's first decode step. Changes no bit; nothing on a
  // backend without graphs or when decode steps are not padded. progress(done, total) after
  // each step. Known limit: a later eager step that grows the backend's scratch beyond what
  // the GEMM preparation gave it (attention split partials of a long prefill) retires the
  // graphs; they are captured again on next use.
  DecodeWarmupResult warm_up_decode_graphs(
      const std::function<void(size_t, size_t)>& progress = {});

  const EngineConfig& config() const { return config_; }
  const Scheduler& scheduler() const { return scheduler_; }
  // Empties the prefix cache of blocks no request holds (Scheduler::reset_prefix_cache);
  // returns how many blocks it dropped. Changes no bit of any later request.
  int32_t reset_prefix_cache() { return scheduler_.reset_prefix_cache(); }
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
    // A constrained request's grammar state for this sample (sample 0 from add_request, the
    // others forked from it with their sequences).
    std::optional<GrammarCursor> grammar;
    // Speculative decoding: the draft length and off-switch (draft_policy.h), and the window
    // in flight (drafts proposed, accepted so far; a window may be verified over several steps).
    DraftPolicy draft_policy;
    int32_t window_proposed = 0;
    int32_t window_accepted = 0;
  };
  struct RequestState {
    Request req;
    // The request's sampling row (kernels/sampling/sample_row.h) at position 0, sample 0:
    // built once in add_request from the validated req.sampling; each draw copies it and sets
    // its position and sample index. The CPU and the device sampler both read it.
    SampleRowParams row;
    RequestCallbacks cb;
    std::vector<uint32_t> allowed_words;  // allowed_token_ids as a bitmask (empty: all)
    std::vector<SampleState> samples;     // (n)
    bool forked = false;
    bool speculative = false;  // verified mode, deterministic: candidates + verification
    bool drafting = false;     // speculative decoding: n-gram drafts + exact acceptance
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
    // Logit penalties (kernels/sampling/logit_penalties.h): the entries of every draw whose
    // request has penalties, row = draw index, from the draw's history (the sequence's tokens
    // before the sampled position).
    std::vector<LogitPenalty> penalties;
    std::vector<int64_t> penalty_scratch;
    std::vector<float> host_rows;  // host sampling: (draws, vocab) the draws' rows, penalised
    // Constrained draws (the request has token rules): each one's bitmask over the vocabulary
    // at mask_begin[i] of masks (-1: unconstrained). Every draw is sampled in one backend call
    // (Ops::sample_rows_masked when some draw has a mask), or on the host (sample_allowed).
    std::vector<int64_t> mask_begin;  // (draws)
    std::vector<uint32_t> masks;
    AllowedScratch allowed_scratch;
  };
  // The mask of the next draw (position `position` of sample `sample_index` of r: its grammar's
  // bitmask after the generated tokens before it, then allowed_token_ids, bad_words and
  // min_tokens) into draws_.masks; mask_begin -1 when r has no token rule here.
  void add_mask(RequestState& r, int32_t sample_index, SeqId seq, int32_t position);
  // Samples the step's draws (draws_: rows, params, penalties, masks) into draws_.results.
  void sample_draws();
  // How a sample ends when its grammar allows no token: kStop when the grammar is complete
  // (its stop token was accepted under ignore_eos), kGrammar otherwise.
  static FinishReason grammar_end_reason(const SampleState& s);
  // Appends draw i's penalty entries (nothing when its request has none).
  void add_penalties(int32_t draw, const SamplingParams& sampling, SeqId seq, uint32_t position);
  // The step's plan: windows released for verification first (verified), then schedule();
  // when only held windows are left, the oldest group is released and scheduled at once.
  StepPlan schedule_step();
  // How a step runs: the deterministic numerics when a row belongs to a deterministic request
  // (verified: the verifier's choice), the others' numerics otherwise; fixed_shape when a row
  // belongs to an isolated (padded-mode) sequence — a decode step then runs at
  // decode_fixed_rows rows.
  struct StepClass {
    NumericsMode numerics = NumericsMode::kInvariant;
    bool fixed_shape = false;
    bool deterministic = false;  // a row of a deterministic request
  };
  StepClass step_class(const StepPlan& plan) const;
  void count_step(const StepPlan& plan, const StepClass& cls);
  // EngineStats' window-row step counts: `before` the model's step stats before the forward.
  void count_window_rows(const StepPlan& plan, const LlamaModel::StepStats& before);
  void observe_step(const StepPlan& plan);
  // The first position s draws a token for (the rows before each position give its logits;
  // the draws run to s.first_pos + s.n_tokens); none when s draws nothing this step.
  std::optional<int32_t> first_draw_position(const RequestState& r, const ScheduledSeq& s) const;
  // Plans the step's draws (the n samples of a prompt draw from its last row) and makes them:
  // one Ops::sample_rows call, or sample() on host logits when config_.host_sampling.
  void draw_samples(const StepPlan& plan);
  // What s's rows give after the forward: prompt logprobs, then its sampled token(s) — or, for
  // a speculative sequence, a verdict on its candidates or one more candidate.
  void handle_rows(RequestId rid, RequestState& r, int32_t sample_index, const ScheduledSeq& s,
                   std::span<const SampleResult> draws);
  // Number of the scheduled rows of s whose logits score a prompt token (prompt logprobs).
  int32_t n_prompt_rows(const RequestState& r, const ScheduledSeq& s) const;
  void handle_prompt_rows(RequestState& r, const ScheduledSeq& s);
  void handle_sample(RequestId rid, RequestState& r, int32_t sample_index, const ScheduledSeq& s,
                     int32_t row, int32_t position, std::span<const SampleResult> draws);
  // The experts of the token before `position` (the one s's row that predicts `position`
  // read), when r asked for them (Request::return_routed_experts); empty otherwise.
  std::vector<int32_t> routed_experts_of(const RequestState& r, const ScheduledSeq& s,
                                         int32_t position) const;
  // ---- the verified mode's hooks (verifier_) ----
  bool verified() const { return verifier_.has_value(); }
  // A candidate from a fast row: appended uncommitted; a full window (or one a candidate
  // would stop) is parked for its verification group.
  void handle_candidate(RequestId rid, RequestState& r, int32_t sample_index,
                        const SampleResult& draw);
  // Runs `apply` with a VerdictSink that emits the verdict's tokens on sample `sample_index`
  // of r whose rows are s's (emit_committed, handle_sample): the verified mode's and the
  // drafts' verdicts.
  void with_sink(RequestId rid, RequestState& r, int32_t sample_index, const ScheduledSeq& s,
                 const std::function<void(VerdictSink&)>& apply);
  // ---- speculative decoding (engine_speculation.cpp, docs/speculative.md) ----
  // The request's samples are drafted for: speculation on, the request does not opt out, and
  // no grammar (a draft the grammar refuses would have no mask after it; excluded).
  bool drafts_for(const Request& req) const;
  // The draft_model method's checks (the model given iff the method is draft_model, the
  // same vocabulary, enough context) and its drafter; nothing for the other methods.
  void set_up_draft_model(const LlamaModel* draft_model);
  // Before schedule(): every drafting sample whose next step is a plain decode (only its last
  // committed token to compute) gets up to num_speculative_tokens drafts after it (fewer
  // where its DraftPolicy says so; the draft model's in one batch for all of them).
  void propose_drafts();
  // After the forward: the verdict on a drafting sample's rows (accepted drafts, the draw at
  // the first mismatch, or the next token after a fully accepted window).
  void handle_draft_rows(RequestId rid, RequestState& r, int32_t sample_index,
                         const ScheduledSeq& s, std::span<const SampleResult> draws);
  // Emits one committed token (callbacks, stop rules); true when the sample finished.
  bool emit_committed(RequestId rid, RequestState& r, int32_t sample_index, const ScheduledSeq& s,
                      int32_t row, int32_t position, const SampleResult& res);
  void forget_window(SeqId seq) {
    if (verifier_) verifier_->forget(seq);
    if (draft_model_drafter_) draft_model_drafter_->forget(seq);
  }
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
  std::optional<Verifier> verifier_;       // the verified mode only
  // Speculative method draft_model only.
  std::unique_ptr<DraftModelDrafter> draft_model_drafter_;
  // One draft's cost in target decode steps (DraftPolicy): the draft model's matmul weights
  // per token over the target's; 0 for the n-gram lookup.
  double draft_cost_ = 0.0;
};

}  // namespace detllm::engine
