// The engine's draws (see engine.h): which (row, position, sample) each sampling row of a step
// draws, the mask of each draw whose request has token rules (a grammar, allowed_token_ids,
// bad_words, min_tokens), and the sampling itself — unconstrained draws in one backend call,
// constrained ones on the host (kernels/sampling/masked_sample.h).
#include <algorithm>

#include "core/error.h"
#include "engine/engine.h"

namespace detllm::engine {

std::optional<int32_t> Engine::first_draw_position(const RequestState& r,
                                                   const ScheduledSeq& s) const {
  if (r.req.max_tokens == 0) return std::nullopt;  // scoring only, nothing to draw
  // Trusted rows of a speculative sequence: one draw per candidate they verify, then the
  // sampling row's (if the rows reach it).
  if (r.speculative && verifier_->verifies_rows(s)) return verifier_->first_verified_position(s);
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
  bool any = true;
  if (req.constraint) {
    // Before the fork every sample draws after the same (empty) generated prefix: sample 0's.
    SampleState& owner = r.samples[sample_index].grammar ? r.samples[sample_index] : r.samples[0];
    GrammarCursor& g = *owner.grammar;
    any = g.mask_after(generated, words.first(g.mask_words()));  // ids past its width stay 0
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
  any = any && std::any_of(words.begin(), words.end(), [](uint32_t w) { return w != 0; });
  d.mask_begin.push_back(any ? static_cast<int64_t>(begin) : -2);  // -2: nothing allowed
}

void Engine::sample_draws() {
  StepDraws& d = draws_;
  const size_t n = d.rows.size();
  d.results.resize(n);
  d.row_results.resize(n);
  if (config_.host_sampling) {
    // The reference path: every draw's row to the host, penalised there, and the host
    // sampler: the functions the host backends' ops run (kernels/sampling).
    const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
    const std::span<const float> logits = runner_.host_logits(0, runner_.n_logit_rows());
    d.host_rows.resize(n * vocab);
    for (size_t i = 0; i < n; ++i) {
      const std::span<const float> row =
          logits.subspan(static_cast<size_t>(d.rows[i]) * vocab, vocab);
      std::copy(row.begin(), row.end(), d.host_rows.begin() + static_cast<ptrdiff_t>(i * vocab));
    }
    const int32_t rows = static_cast<int32_t>(n), v = static_cast<int32_t>(vocab);
    if (!d.penalties.empty()) apply_logit_penalties_host(d.host_rows.data(), rows, v, d.penalties);
    for (size_t i = 0; i < n; ++i) {
      const auto row = std::span<const float>(d.host_rows).subspan(i * vocab, vocab);
      d.results[i] = d.mask_begin[i] == -1 ? sample_result_of(sample_row(row, d.params[i]))
                                           : sample_allowed_row(row, i);
    }
    return;
  }
  if (std::all_of(d.mask_begin.begin(), d.mask_begin.end(), [](int64_t b) { return b == -1; })) {
    runner_.sample(d.rows, d.params, d.row_results, d.penalties);
    stats_.n_rows_sampled_on_backend += static_cast<int64_t>(n);
    for (size_t i = 0; i < n; ++i) d.results[i] = sample_result_of(d.row_results[i]);
    return;
  }
  // Draws without a grammar: one backend call over their rows (penalty rows renumbered).
  d.free_draws.clear();
  d.free_rows.clear();
  d.free_params.clear();
  d.free_penalties.clear();
  std::vector<int32_t> compact(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (d.mask_begin[i] != -1) continue;
    compact[i] = static_cast<int32_t>(d.free_draws.size());
    d.free_draws.push_back(static_cast<int32_t>(i));
    d.free_rows.push_back(d.rows[i]);
    d.free_params.push_back(d.params[i]);
  }
  for (LogitPenalty e : d.penalties) {
    if (compact[static_cast<size_t>(e.row)] < 0) continue;
    e.row = compact[static_cast<size_t>(e.row)];
    d.free_penalties.push_back(e);
  }
  if (!d.free_draws.empty()) {
    d.free_results.resize(d.free_draws.size());
    runner_.sample(d.free_rows, d.free_params, d.free_results, d.free_penalties);
    stats_.n_rows_sampled_on_backend += static_cast<int64_t>(d.free_draws.size());
    for (size_t j = 0; j < d.free_draws.size(); ++j) {
      d.results[static_cast<size_t>(d.free_draws[j])] = sample_result_of(d.free_results[j]);
    }
  }
  // Constrained draws on the host: the row (downloaded on a device backend), penalised.
  const int32_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < n; ++i) {
    if (d.mask_begin[i] == -1) continue;
    if (d.mask_begin[i] == -2) {  // nothing allowed: no row needed
      d.results[i] = sample_allowed_row({}, i);
      continue;
    }
    std::span<const float> row = runner_.host_logits(d.rows[i], 1);
    const auto [lo, hi] = std::equal_range(
        d.penalties.begin(), d.penalties.end(), LogitPenalty{static_cast<int32_t>(i)},
        [](const LogitPenalty& a, const LogitPenalty& b) { return a.row < b.row; });
    if (lo != hi) {
      d.row_scratch.assign(row.begin(), row.end());
      std::vector<LogitPenalty> entries(lo, hi);
      for (LogitPenalty& e : entries) e.row = 0;
      apply_logit_penalties_host(d.row_scratch.data(), 1, vocab, entries);
      row = d.row_scratch;
    }
    d.results[i] = sample_allowed_row(row, i);
  }
}

FinishReason Engine::grammar_end_reason(const SampleState& s) {
  return s.grammar && s.grammar->complete() ? FinishReason::kStop : FinishReason::kGrammar;
}

SampleResult Engine::sample_allowed_row(std::span<const float> row, size_t i) {
  StepDraws& d = draws_;
  if (d.mask_begin[i] == -2) {
    SampleResult none;
    none.none_allowed = true;
    return none;
  }
  const SampleRowParams& p = d.params[i];
  const int32_t vocab = model_.config().vocab_size;  // every mask spans the logit row
  const AllowedIds allowed{
      std::span<const uint32_t>(d.masks).subspan(static_cast<size_t>(d.mask_begin[i]),
                                                 structured::TokenConstraint::bitmask_words(vocab)),
      vocab};
  return sample_allowed(row, sampling_params_of(p), p.position, p.sample_index, allowed,
                        d.allowed_scratch);
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
