// Engine: scheduling, one forward per step, sampling, stop rules (see engine.h).
#include "engine/engine.h"

#include <algorithm>

#include "core/error.h"
#include "core/parallel.h"
#include "determinism/modes.h"
#include "tokenizer/tokenizer.h"

namespace detllm::engine {
namespace {
// Where decode steps are padded (and replayed from graphs), drafting windows are verified as
// decode rows, so that a verify step is a decode step too (SchedulerConfig).
EngineConfig with_window_rows(EngineConfig c, const LlamaModel& model) {
  c.scheduler.windows_as_decode_rows =
      c.scheduler.windows_as_decode_rows ||
      pads_decode_steps(c.cuda_graphs, model.graph_capture() != nullptr);
  return c;
}
}  // namespace

Engine::Engine(const LlamaModel& model, const EngineConfig& config, const Tokenizer* tokenizer,
               const LlamaModel* draft_model)
    : model_(model),
      config_(with_window_rows(config.resolved(model.config()), model)),
      tokenizer_(tokenizer),
      scheduler_(config_.scheduler),
      runner_(model, config_.scheduler.kv.n_blocks, config_.scheduler.kv.block_size,
              config_.decode_padding()) {
  if (tokenizer_ && tokenizer_->eos_id()) eos_ids_.push_back(*tokenizer_->eos_id());
  if (config_.policy.mode == DeterminismMode::kVerified) {
    verifier_.emplace(config_.verify, scheduler_, stats_);
  }
  set_up_draft_model(draft_model);
  if (config_.speculative.enabled()) {  // every position is reported, from the start
    stats_.n_accepted_draft_tokens_per_pos.assign(
        static_cast<size_t>(config_.speculative.num_speculative_tokens), 0);
  }
}

Engine::~Engine() = default;

RequestId Engine::add_request(Request request, RequestCallbacks callbacks) {
  request.validate(model_.config().vocab_size, config_.max_model_len);
  check(request.stop.empty() || tokenizer_ != nullptr,
        "stop strings need a tokenizer; this engine has none");
  check(!request.return_routed_experts || model_.has_experts(),
        "return_routed_experts: this model has no experts to report (it is not a "
        "mixture-of-experts model)");
  if (!deterministic_allowed() && is_deterministic(request)) {
    throw SelfCheckRefusal(config_.self_check.refusal_message());
  }
  SequenceOptions opts;
  opts.max_new_tokens = request.max_tokens;
  opts.all_logits = request.prompt_logprobs >= 0;
  // KV computed under different numerics is never shared through the prefix cache.
  opts.numerics_class =
      static_cast<uint64_t>(config_.policy.mode_for(is_deterministic(request))) + 1;
  // Verified mode: deterministic requests decode fast and verify (their trusted KV is
  // invariant: class of the invariant numerics); the others run fast, never verified.
  opts.speculative = verified() && is_deterministic(request);
  // Speculative decoding keeps its drafts as the scheduler's uncommitted tokens.
  const bool drafting = drafts_for(request);
  opts.speculative = opts.speculative || drafting;
  opts.drafted = drafting;
  // padded (CoRun): deterministic requests prefill alone and decode at the fixed shape; the
  // others are scheduled around them as usual.
  opts.isolated = mode_info(config_.policy.mode).isolate_prefill && is_deterministic(request);
  const SeqId seq = scheduler_.add(request.prompt, opts);

  const RequestId id = next_id_++;
  RequestState& r = requests_[id];
  r.req = std::move(request);
  r.row = sample_row_params(r.req.sampling, 0, 0);
  r.cb = std::move(callbacks);
  r.samples.resize(r.req.n);
  for (SampleState& st : r.samples) {
    st.draft_policy = DraftPolicy(config_.speculative.num_speculative_tokens,
                                  config_.speculative.adaptive, draft_cost_);
  }
  r.samples[0].seq = seq;
  if (r.req.constraint) r.samples[0].grammar.emplace(r.req.constraint->fork());
  if (!r.req.allowed_token_ids.empty()) {
    r.allowed_words.assign(structured::TokenConstraint::bitmask_words(model_.config().vocab_size),
                           0u);
    for (int32_t id : r.req.allowed_token_ids) {
      r.allowed_words[static_cast<size_t>(id) >> 5] |= uint32_t{1} << (id & 31);
    }
  }
  r.speculative = verified() && is_deterministic(r.req);
  r.drafting = drafting;
  r.n_live = r.req.n;
  if (r.req.prompt_logprobs >= 0) {
    r.prompt_logprobs.resize(r.req.prompt.size() - 1);
    r.prompt_logprob_filled.assign(r.req.prompt.size() - 1, false);
  }
  seq_owner_[seq] = {id, 0};
  ++stats_.n_requests;
  stats_.n_prompt_tokens += static_cast<int64_t>(r.req.prompt.size());
  return id;
}

void Engine::abort(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  RequestState& r = it->second;
  for (int32_t k = 0; k < r.req.n; ++k) {
    SampleState& s = r.samples[k];
    if (s.done) continue;
    if (s.seq >= 0) {
      forget_window(s.seq);
      scheduler_.abort(s.seq);
      seq_owner_.erase(s.seq);
    }
    s.done = true;
    if (r.cb.on_finish) {
      r.cb.on_finish(k, FinishReason::kAbort,
                     {static_cast<int32_t>(r.req.prompt.size()),
                      static_cast<int32_t>(s.generated.size()), r.cached_tokens, 0});
    }
  }
  requests_.erase(it);
}

RequestStatus Engine::status(RequestId id) const {
  RequestStatus st;
  auto it = requests_.find(id);
  if (it == requests_.end()) return st;
  const RequestState& r = it->second;
  st.state = RequestStatus::State::kWaiting;
  st.prompt_tokens = static_cast<int32_t>(r.req.prompt.size());
  for (const SampleState& s : r.samples) {
    st.generated_tokens += static_cast<int32_t>(s.generated.size());
    if (s.done || s.seq < 0) continue;
    ++st.live_samples;
    const Sequence& seq = scheduler_.sequence(s.seq);
    if (seq.status == SeqStatus::kRunning) st.state = RequestStatus::State::kRunning;
    st.cached_tokens = std::max(st.cached_tokens, seq.n_cached_tokens);
    st.preemptions += seq.n_preemptions;
  }
  return st;
}

bool Engine::step() {
  if (!scheduler_.has_unfinished()) return false;
  StepPlan plan = schedule_step();
  if (plan.empty()) return false;
  const StepClass cls = step_class(plan);
  plan.numerics = cls.numerics;
  count_step(plan, cls);
  if (step_observer_) observe_step(plan);
  const LlamaModel::StepStats before = model_.step_stats();
  runner_.run(plan, cls.fixed_shape);  // the logits stay in backend memory
  count_window_rows(plan, before);
  // Trusted KV: the verified mode's invariant steps; every step elsewhere (a drafting
  // sequence's KV is its request's own numerics; only committed tokens' KV is published).
  scheduler_.complete_step(plan, !verifier_ || cls.numerics == NumericsMode::kInvariant);
  ++stats_.n_steps;
  stats_.n_computed_tokens += plan.n_tokens();
  const int64_t downloaded = runner_.n_logit_rows_downloaded();
  draw_samples(plan);

  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& s = plan.seqs[i];
    auto owner = seq_owner_.find(s.id);
    if (owner == seq_owner_.end()) continue;  // aborted meanwhile
    const auto [rid, sample_index] = owner->second;
    const std::span<const SampleResult> draws =
        std::span<const SampleResult>(draws_.results)
            .subspan(static_cast<size_t>(draws_.begin[i]),
                     static_cast<size_t>(draws_.begin[i + 1] - draws_.begin[i]));
    handle_rows(rid, requests_.at(rid), sample_index, s, draws);
  }
  stats_.n_logit_rows_downloaded += runner_.n_logit_rows_downloaded() - downloaded;
  return true;
}

StepPlan Engine::schedule_step() {
  if (config_.speculative.enabled()) propose_drafts();
  if (verifier_) verifier_->release_groups(/*force=*/false);
  StepPlan plan = scheduler_.schedule();
  if (!verifier_) return plan;
  for (SeqId id : plan.preempted) verifier_->forget(id);  // the scheduler dropped its candidates
  if (plan.empty() && verifier_->has_parked()) {  // only held windows are left: verify them now
    verifier_->release_groups(/*force=*/true);
    plan = scheduler_.schedule();
    for (SeqId id : plan.preempted) verifier_->forget(id);
  }
  return plan;
}

DecodeWarmupResult Engine::warm_up_decode_graphs(
    const std::function<void(size_t, size_t)>& progress) {
  check(requests_.empty(), "warm_up_decode_graphs: call it before the first request");
  // The numerics of the engine's steps (step_class): deterministic rows', the others', and
  // both in the verified mode.
  std::vector<NumericsMode> numerics{config_.policy.deterministic_mode};
  auto add = [&](NumericsMode m) {
    if (std::find(numerics.begin(), numerics.end(), m) == numerics.end()) numerics.push_back(m);
  };
  add(config_.policy.default_mode);
  if (verifier_) {
    add(NumericsMode::kInvariant);
    add(NumericsMode::kFast);
  }
  const size_t limit = kMaxStepGraphs / 2 / numerics.size();  // room for other shapes
  // Windows verified as decode rows make decode steps of up to max_seqs · (K + 1) rows.
  int32_t max_rows = config_.scheduler.max_seqs;
  if (config_.speculative.enabled() && config_.scheduler.windows_as_decode_rows) {
    const int64_t rows = int64_t{max_rows} * (config_.speculative.num_speculative_tokens + 1);
    max_rows = static_cast<int32_t>(
        std::min<int64_t>(rows, std::max(max_rows, config_.scheduler.max_tokens_per_step)));
  }
  return runner_.warm_up(numerics, max_rows, config_.max_model_len,
                         config_.scheduler.max_tokens_per_step, limit, progress);
}

Engine::StepClass Engine::step_class(const StepPlan& plan) const {
  StepClass c;
  bool drafted_deterministic = false;
  for (const ScheduledSeq& s : plan.seqs) {
    auto owner = seq_owner_.find(s.id);
    if (owner == seq_owner_.end() || !is_deterministic(requests_.at(owner->second.first).req)) {
      continue;
    }
    c.deterministic = true;
    drafted_deterministic = drafted_deterministic || scheduler_.sequence(s.id).options.drafted;
    c.fixed_shape = c.fixed_shape || scheduler_.sequence(s.id).options.isolated;
  }
  // One step, one set of GEMMs: a row of a deterministic request puts the whole step on the
  // deterministic numerics (and, padded, at the fixed decode shape); a step of other requests
  // only runs on theirs (docs/modes.md, "Mixed traffic"). Verified: the verifier says which.
  if (verifier_) {
    // A deterministic sequence's drafts take the place of its fast candidates: every row it
    // computes (the last committed token and the drafts after it) runs on the invariant
    // numerics over trusted KV, so the verdict commits invariant draws (docs/speculative.md).
    c.numerics = drafted_deterministic ? NumericsMode::kInvariant : verifier_->step_numerics(plan);
  } else {
    c.numerics = c.deterministic ? config_.policy.deterministic_mode : config_.policy.default_mode;
  }
  return c;
}

void Engine::count_step(const StepPlan& plan, const StepClass& cls) {
  ++(cls.numerics == NumericsMode::kInvariant ? stats_.n_invariant_steps : stats_.n_fast_steps);
  stats_.n_deterministic_steps += cls.deterministic;
  if (verifier_) stats_.n_verify_steps += verifier_->verifies_window(plan);
}

void Engine::count_window_rows(const StepPlan& plan, const LlamaModel::StepStats& before) {
  const bool window_rows = std::any_of(plan.seqs.begin(), plan.seqs.end(),
                                       [](const ScheduledSeq& s) { return s.decode_rows; });
  if (!window_rows) return;
  const LlamaModel::StepStats& after = model_.step_stats();
  ++stats_.n_window_row_steps;
  stats_.n_window_row_steps_padded += after.n_padded_steps > before.n_padded_steps;
  stats_.n_window_row_steps_replayed += after.n_graph_replays > before.n_graph_replays;
}

void Engine::observe_step(const StepPlan& plan) {
  request_of_seq_.clear();
  for (const ScheduledSeq& s : plan.seqs) {
    const auto owner = seq_owner_.find(s.id);
    request_of_seq_.push_back(owner == seq_owner_.end() ? RequestId{-1} : owner->second.first);
  }
  step_observer_(StepView{plan, request_of_seq_});
}

void Engine::handle_rows(RequestId rid, RequestState& r, int32_t sample_index,
                         const ScheduledSeq& s, std::span<const SampleResult> draws) {
  if (s.all_logits && s.logits_begin >= 0) handle_prompt_rows(r, s);
  if (r.drafting && r.req.max_tokens > 0) {
    handle_draft_rows(rid, r, sample_index, s, draws);
    return;
  }
  if (r.speculative && r.req.max_tokens > 0) {
    if (verifier_->verifies_rows(s)) {
      with_sink(rid, r, sample_index, s,
                [&](VerdictSink& sink) { verifier_->verify_rows(s, draws, sink); });
    } else if (s.sample) {
      handle_candidate(rid, r, sample_index, draws[0]);
    }
    return;
  }
  if (!s.sample) return;
  const int32_t row = s.logit_row(s.first_pos + s.n_tokens - 1);
  handle_sample(rid, r, sample_index, s, row, s.first_pos + s.n_tokens, draws);
}

std::vector<int32_t> Engine::routed_experts_of(const RequestState& r, const ScheduledSeq& s,
                                               int32_t position) const {
  if (!r.req.return_routed_experts) return {};
  // The row that predicts `position` read the token at position − 1 (TokenEvent).
  const int32_t j = position - 1 - s.first_pos;
  check(j >= 0 && j < s.n_tokens,
        "engine: internal error: position {} is not predicted by this step's rows [{}, {})",
        position, s.first_pos + 1, s.first_pos + s.n_tokens + 1);
  const std::span<const int32_t> ids = model_.routed_experts(s.token_begin + j);
  return {ids.begin(), ids.end()};
}

void Engine::with_sink(RequestId rid, RequestState& r, int32_t sample_index, const ScheduledSeq& s,
                       const std::function<void(VerdictSink&)>& apply) {
  class Sink final : public VerdictSink {
   public:
    Sink(Engine& e, RequestId rid, RequestState& r, int32_t k, const ScheduledSeq& s)
        : e_(e), rid_(rid), r_(r), k_(k), s_(s) {}
    bool emit_committed(int32_t row, int32_t position, const SampleResult& draw) override {
      return e_.emit_committed(rid_, r_, k_, s_, row, position, draw);
    }
    void sample(int32_t row, int32_t position, std::span<const SampleResult> d) override {
      e_.handle_sample(rid_, r_, k_, s_, row, position, d);
    }

   private:
    Engine& e_;
    RequestId rid_;
    RequestState& r_;
    int32_t k_;
    const ScheduledSeq& s_;
  } sink(*this, rid, r, sample_index, s);
  apply(sink);
}

// ---- the verified mode's hooks ----

void Engine::handle_candidate(RequestId rid, RequestState& r, int32_t sample_index,
                              const SampleResult& draw) {
  check(r.forked, "engine: internal error: a candidate before the first committed token");
  const SampleState& st = r.samples[sample_index];
  if (draw.none_allowed) {
    // The grammar allows nothing after the tokens so far. With no candidate pending those are
    // committed and the sample ends here, as it would on the invariant numerics; otherwise the
    // window is verified first (its candidates decide whether this position is reached).
    if (verifier_->candidates(st.seq).empty()) {
      finish_sample(rid, r, sample_index, grammar_end_reason(st));
    } else {
      verifier_->park(st.seq);
    }
    return;
  }
  bool ready = verifier_->add_candidate(st.seq, draw.token);
  if (!ready) {  // a candidate that would stop the sample: verify the window now
    SampleState with_candidates;
    with_candidates.generated = st.generated;
    const std::span<const int32_t> candidates = verifier_->candidates(st.seq);
    with_candidates.generated.insert(with_candidates.generated.end(), candidates.begin(),
                                     candidates.end());
    ready = stop_reason(r, with_candidates, draw.token) != FinishReason::kNone;
  }
  if (ready) verifier_->park(st.seq);
}

bool Engine::emit_committed(RequestId rid, RequestState& r, int32_t sample_index,
                            const ScheduledSeq& s, int32_t row, int32_t position,
                            const SampleResult& res) {
  SampleState& st = r.samples[sample_index];
  if (res.none_allowed) {  // no token here, so no logits of one either
    finish_sample(rid, r, sample_index, grammar_end_reason(st));
    return true;
  }
  if (r.req.capture_logits && r.cb.on_logits) {
    r.cb.on_logits(sample_index, position, runner_.host_logits(row, 1));
  }
  st.generated.push_back(res.token);
  ++stats_.n_generated_tokens;
  if (r.speculative) ++stats_.n_committed_tokens;
  if (r.cb.on_token) {
    r.cb.on_token({sample_index, position, res.token, res.logprob, res.top_logprobs,
                   routed_experts_of(r, s, position)});
  }
  const FinishReason reason = stop_reason(r, st, res.token);
  if (reason == FinishReason::kNone) return false;
  finish_sample(rid, r, sample_index, reason);
  return true;
}

int32_t Engine::n_prompt_rows(const RequestState& r, const ScheduledSeq& s) const {
  // Row j predicts the token at position first_pos + j + 1: a prompt token while < n_prompt.
  const int32_t n_prompt = static_cast<int32_t>(r.req.prompt.size());
  return std::clamp(n_prompt - 1 - s.first_pos, 0, s.n_tokens);
}

void Engine::handle_prompt_rows(RequestState& r, const ScheduledSeq& s) {
  const int32_t vocab = model_.config().vocab_size;
  const int32_t n_rows = n_prompt_rows(r, s);
  // Only these rows come to the host (decode steps of a scoring request download nothing).
  const std::span<const float> logits =
      n_rows > 0 ? runner_.host_logits(s.logits_begin, n_rows) : std::span<const float>{};
  auto score_rows = [&](int32_t begin, int32_t end) {
    for (int32_t j = begin; j < end; ++j) {
      const int32_t target = s.first_pos + j + 1;  // the token these logits predict
      const auto row = logits.subspan(static_cast<size_t>(j) * vocab, vocab);
      PromptLogprob& lp = r.prompt_logprobs[target - 1];
      lp.position = target;
      lp.token = r.req.prompt[target];
      lp.logprob = logprob_of(row, lp.token);
      const float x = row[static_cast<size_t>(lp.token)];
      lp.rank = 1 + static_cast<int32_t>(
                        std::count_if(row.begin(), row.end(), [x](float v) { return v > x; }));
      lp.top_logprobs = top_logprobs(row, r.req.prompt_logprobs);
      lp.routed_experts = routed_experts_of(r, s, target);
    }
  };
  // Each row's logprobs depend on that row alone, so a large scoring step (teacher forcing a
  // batch of sequences: ~2k rows of a 49k vocabulary is 0.1 G exp evaluations) is spread over
  // the cores in parts of 16 rows; the bits are the serial loop's.
  constexpr int32_t kRowsPerPart = 16;
  const bool parallel = static_cast<int64_t>(n_rows) * vocab >= (int64_t{1} << 23);
  if (parallel) {
    const size_t n_parts = static_cast<size_t>((n_rows + kRowsPerPart - 1) / kRowsPerPart);
    parallel_each(n_parts, n_parts, [&](size_t part) {
      const int32_t begin = static_cast<int32_t>(part) * kRowsPerPart;
      score_rows(begin, std::min(n_rows, begin + kRowsPerPart));
    });
  } else {
    score_rows(0, n_rows);
  }
  for (int32_t j = 0; j < n_rows; ++j) {
    const int32_t target = s.first_pos + j + 1;
    r.prompt_logprob_filled[target - 1] = true;
    if (r.req.capture_logits && r.cb.on_logits) {
      r.cb.on_logits(0, target, logits.subspan(static_cast<size_t>(j) * vocab, vocab));
    }
  }
  if (!r.prompt_logprobs_sent &&
      std::all_of(r.prompt_logprob_filled.begin(), r.prompt_logprob_filled.end(),
                  [](bool b) { return b; })) {
    r.prompt_logprobs_sent = true;
    if (r.cb.on_prompt_logprobs) r.cb.on_prompt_logprobs(r.prompt_logprobs);
  }
}

void Engine::handle_sample(RequestId rid, RequestState& r, int32_t sample_index,
                           const ScheduledSeq& s, int32_t row, int32_t position,
                           std::span<const SampleResult> draws) {
  if (r.cached_tokens == 0 && r.samples[sample_index].seq >= 0) {
    r.cached_tokens = scheduler_.sequence(r.samples[sample_index].seq).n_cached_tokens;
  }
  if (r.req.max_tokens == 0) {  // scoring only: the prompt is done
    finish_sample(rid, r, sample_index, FinishReason::kLength);
    return;
  }
  // The first sampled position: the other samples fork from this one and share its prompt KV
  // and these logits; each drew from its own Philox stream (sample_index; draw_samples).
  std::vector<int32_t> group{sample_index};
  if (!r.forked) {
    r.forked = true;
    for (int32_t k = 1; k < r.req.n; ++k) {
      const SeqId child = scheduler_.fork(r.samples[0].seq);
      r.samples[k].seq = child;
      if (r.samples[0].grammar) r.samples[k].grammar.emplace(r.samples[0].grammar->fork());
      seq_owner_[child] = {rid, k};
      group.push_back(k);
    }
  }
  check(group.size() == draws.size(), "engine: internal error: {} samples but {} draws",
        group.size(), draws.size());
  // Captured logits (conformance, audit) are the only reason a sampled row comes to the host.
  const bool capture = r.req.capture_logits && static_cast<bool>(r.cb.on_logits);
  const std::span<const float> row_logits =
      capture ? runner_.host_logits(row, 1) : std::span<const float>{};
  const std::vector<int32_t> routed = routed_experts_of(r, s, position);  // shared by the group
  for (size_t j = 0; j < group.size(); ++j) {
    const int32_t k = group[j];
    SampleState& st = r.samples[k];
    const SampleResult& res = draws[j];
    if (res.none_allowed) {  // no token here (and no logits of one): the sample ends
      finish_sample(rid, r, k, grammar_end_reason(st));
      continue;
    }
    if (capture) r.cb.on_logits(k, position, row_logits);
    scheduler_.append_token(st.seq, res.token);
    st.generated.push_back(res.token);
    ++stats_.n_generated_tokens;
    if (r.speculative) ++stats_.n_committed_tokens;
    if (r.cb.on_token) {
      r.cb.on_token({k, position, res.token, res.logprob, res.top_logprobs, routed});
    }
    const FinishReason reason = stop_reason(r, st, res.token);
    if (reason != FinishReason::kNone) finish_sample(rid, r, k, reason);
  }
}

FinishReason Engine::stop_reason(const RequestState& r, const SampleState& s, int32_t token) const {
  // min_tokens: no stop rule before it (eos and the stop ids were masked anyway).
  if (static_cast<int32_t>(s.generated.size()) < r.req.min_tokens) {
    return static_cast<int32_t>(s.generated.size()) >= r.req.max_tokens ? FinishReason::kLength
                                                                        : FinishReason::kNone;
  }
  if (!r.req.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) {
    return FinishReason::kStop;
  }
  const auto& stops = r.req.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end()) return FinishReason::kStop;
  if (!r.req.stop.empty()) {
    // Decode a window of recent tokens: enough for the longest stop string (a token is at
    // least one byte), plus slack for multi-byte characters split across tokens.
    size_t longest = 0;
    for (const auto& st : r.req.stop) longest = std::max(longest, st.size());
    const size_t window = std::min(s.generated.size(), longest + 4);
    const std::string tail =
        tokenizer_->decode(std::span(s.generated).last(window), /*skip_special_tokens=*/false);
    for (const auto& st : r.req.stop) {
      if (tail.find(st) != std::string::npos) return FinishReason::kStop;
    }
  }
  if (static_cast<int32_t>(s.generated.size()) >= r.req.max_tokens) return FinishReason::kLength;
  return FinishReason::kNone;
}

void Engine::finish_sample(RequestId rid, RequestState& r, int32_t sample_index,
                           FinishReason reason) {
  SampleState& s = r.samples[sample_index];
  const Sequence& seq = scheduler_.sequence(s.seq);
  const Usage usage{static_cast<int32_t>(r.req.prompt.size()),
                    static_cast<int32_t>(s.generated.size()), r.cached_tokens, seq.n_preemptions};
  stats_.n_cached_tokens += sample_index == 0 ? r.cached_tokens : 0;
  forget_window(s.seq);
  scheduler_.finish(s.seq);
  seq_owner_.erase(s.seq);
  s.done = true;
  --r.n_live;
  if (r.cb.on_finish) r.cb.on_finish(sample_index, reason, usage);
  if (r.n_live == 0) requests_.erase(rid);  // r dangles from here on
}

}  // namespace detllm::engine
