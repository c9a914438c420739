// The engine's draws (see engine.h): which (row, position, sample) each sampling row of a step
// draws, the mask of each draw whose request has token rules (a grammar, allowed_token_ids,
// bad_words, min_tokens), and the sampling itself — every draw in one backend call
// (Ops::sample_rows_masked for the masked ones, kernels/sampling/masked_sample.h), or on the
// host with EngineConfig::host_sampling.
#include <algorithm>

#include "core/error.h"
#include "engine/engine.h"

namespace detllm::engine {

std::optional<int32_t> Engine::first_draw_position(const RequestState& r,
                                                   const ScheduledSeq& s) const {
  if (r.req.max_tokens == 0) return std::nullopt;  // scoring only, nothing to draw
  // Trusted rows of a speculative sequence: one draw per candidate they verify, then the
  // sampling row's (if the rows reach it).
  if (r.speculative && verifier_->verifies_rows(s)) {
    return first_verified_position(scheduler_.sequence(s.id), s);
  }
  // A drafting sequence: one draw per draft its rows score, then the sampling row's.
  if (r.drafting) {
    const int32_t first = first_verified_position(scheduler_.sequence(s.id), s);
    if (first <= s.first_pos + s.n_tokens) return first;
    return std::nullopt;
  }
  if (s.sample) return s.first_pos + s.n_tokens;
  return std::nullopt;
}

void Engine::draw_samples(const StepPlan& plan) {
  StepDraws& d = draws_;
  d.begin.assign(1, 0);
  d.rows.clear();
  d.params.clear();
  d.penalties.clear();
  d.mask_begin.clear();
  d.masks.clear();
  for (const ScheduledSeq& s : plan.seqs) {
    auto owner = seq_owner_.find(s.id);
    if (owner != seq_owner_.end()) {
      const auto [rid, sample_index] = owner->second;
      RequestState& r = requests_.at(rid);
      const std::optional<int32_t> first = first_draw_position(r, s);
      const int32_t end = s.first_pos + s.n_tokens;
      // Position t draws from row t - 1 on the Philox stream (seed, t, sample index). At the
      // first sampled position the other samples fork from this one (handle_sample) and draw
      // from the same row, each from its own stream (sample index j).
      for (int32_t t = first.value_or(end + 1); t <= end; ++t) {
        const int32_t n_draws = s.sample && t == end && !r.forked ? r.req.n : 1;
        for (int32_t j = 0; j < n_draws; ++j) {
          const int32_t k = n_draws == 1 ? sample_index : j;
          add_penalties(static_cast<int32_t>(d.rows.size()), r.req.sampling, s.id,
                        static_cast<uint32_t>(t));
          d.rows.push_back(s.logit_row(t - 1));
          SampleRowParams& p = d.params.emplace_back(r.row);
          p.position = static_cast<uint32_t>(t);
          p.sample_index = static_cast<uint32_t>(k);
          add_mask(r, k, s.id, t);
        }
      }
    }
    d.begin.push_back(static_cast<int32_t>(d.rows.size()));
  }

  sample_draws();
}

void Engine::add_mask(RequestState& r, int32_t sample_index, SeqId seq, int32_t position) {
  StepDraws& d = draws_;
  const Sequence& q = scheduler_.sequence(seq);
  check(position >= q.n_prompt && position <= q.n_tokens(),
        "engine: internal error: a draw at position {} of a sequence of {} tokens ({} prompt)",
        position, q.n_tokens(), q.n_prompt);
  const std::span<const int32_t> generated = std::span<const int32_t>(q.tokens).subspan(
      static_cast<size_t>(q.n_prompt), static_cast<size_t>(position - q.n_prompt));
  const Request& req = r.req;
  const bool below_min = static_cast<int32_t>(generated.size()) < req.min_tokens;
  if (!req.constraint && req.allowed_token_ids.empty() && req.bad_words.empty() && !below_min) {
    d.mask_begin.push_back(-1);
    return;
  }
  const int32_t vocab = model_.config().vocab_size;
  const size_t begin = d.masks.size();
  const size_t n_words = structured::TokenConstraint::bitmask_words(vocab);
  d.masks.resize(begin + n_words, 0u);
  const std::span<uint32_t> words = std::span<uint32_t>(d.masks).subspan(begin, n_words);
  if (req.constraint) {
    // Before the fork every sample draws after the same (empty) generated prefix: sample 0's.
    SampleState& owner = r.samples[sample_index].grammar ? r.samples[sample_index] : r.samples[0];
    GrammarCursor& g = *owner.grammar;
    g.mask_after(generated, words.first(g.mask_words()));  // ids past its width stay 0
  } else {
    std::fill(words.begin(), words.end(), ~0u);
    if (const int32_t rest = vocab % 32) words.back() = (uint32_t{1} << rest) - 1;
  }
  auto clear = [&](int32_t id) {
    words[static_cast<size_t>(id) >> 5] &= ~(uint32_t{1} << (id & 31));
  };
  if (!r.allowed_words.empty()) {
    for (size_t w = 0; w < n_words; ++w) words[w] &= r.allowed_words[w];
  }
  for (const std::vector<int32_t>& bad : req.bad_words) {
    const size_t lead = bad.size() - 1;
    if (generated.size() >= lead &&
        std::equal(bad.begin(), bad.begin() + static_cast<ptrdiff_t>(lead),
                   generated.end() - static_cast<ptrdiff_t>(lead))) {
      clear(bad.back());
    }
  }
  if (below_min) {
    for (int32_t id : eos_ids_) clear(id);
    for (int32_t id : req.stop_token_ids) clear(id);
  }
  // A mask that allows nothing (or only ids whose logits are -inf) gives the draw no token
  // (SampleResult::none_allowed) on every path.
  d.mask_begin.push_back(static_cast<int64_t>(begin));
}

void Engine::sample_draws() {
  StepDraws& d = draws_;
  const size_t n = d.rows.size();
  d.results.resize(n);
  d.row_results.resize(n);
  const bool masked =
      std::any_of(d.mask_begin.begin(), d.mask_begin.end(), [](int64_t b) { return b >= 0; });
  const int32_t vocab = model_.config().vocab_size;  // every mask spans the logit row
  if (config_.host_sampling) {
    // The reference path: every draw's row to the host, penalised there, and the host
    // sampler: the functions the host backends' ops run (kernels/sampling).
    const size_t v = static_cast<size_t>(vocab);
    const std::span<const float> logits = runner_.host_logits(0, runner_.n_logit_rows());
    d.host_rows.resize(n * v);
    for (size_t i = 0; i < n; ++i) {
      const std::span<const float> row = logits.subspan(static_cast<size_t>(d.rows[i]) * v, v);
      std::copy(row.begin(), row.end(), d.host_rows.begin() + static_cast<ptrdiff_t>(i * v));
    }
    const int32_t rows = static_cast<int32_t>(n);
    if (!d.penalties.empty()) {
      apply_logit_penalties_host(d.host_rows.data(), rows, vocab, d.penalties);
    }
    const size_t n_words = structured::TokenConstraint::bitmask_words(vocab);
    for (size_t i = 0; i < n; ++i) {
      const auto row = std::span<const float>(d.host_rows).subspan(i * v, v);
      const SampleRowParams& p = d.params[i];
      d.results[i] =
          d.mask_begin[i] < 0
              ? sample_result_of(sample_row(row, p))
              : sample_allowed(row, p, p.position, p.sample_index,
                               AllowedIds{std::span<const uint32_t>(d.masks).subspan(
                                              static_cast<size_t>(d.mask_begin[i]), n_words),
                                          vocab},
                               d.allowed_scratch);
    }
    return;
  }
  runner_.sample(d.rows, d.params, d.row_results, d.penalties,
                 masked ? std::span<const uint32_t>(d.masks) : std::span<const uint32_t>(),
                 masked ? std::span<const int64_t>(d.mask_begin) : std::span<const int64_t>());
  stats_.n_rows_sampled_on_backend += static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) d.results[i] = sample_result_of(d.row_results[i]);
}

FinishReason Engine::grammar_end_reason(const SampleState& s) {
  return s.grammar && s.grammar->complete() ? FinishReason::kStop : FinishReason::kGrammar;
}

void Engine::add_penalties(int32_t draw, const SamplingParams& sampling, SeqId seq,
                           uint32_t position) {
  if (!sampling.has_penalties()) return;
  const Sequence& q = scheduler_.sequence(seq);
  check(position <= q.tokens.size(), "engine: internal error: draw at position {} of {} tokens",
        position, q.tokens.size());
  build_logit_penalties(sampling, std::span(q.tokens).first(position), q.n_prompt, draw,
                        draws_.penalties, draws_.penalty_scratch);
}

}  // namespace detllm::engine
