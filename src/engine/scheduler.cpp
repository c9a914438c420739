// Continuous-batching scheduler: token budget, chunked prefill, FCFS admission with prefix-cache
// reuse, preemption by recompute, fork for n samples. The policy and the contract with the
// runner are written in scheduler.h.
#include "engine/scheduler.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace detllm::engine {

void SchedulerConfig::validate() const {
  kv.validate();
  check(max_tokens_per_step >= 1, "scheduler: max_tokens_per_step must be >= 1 (got {})",
        max_tokens_per_step);
  check(max_seqs >= 1, "scheduler: max_seqs must be >= 1 (got {})", max_seqs);
  check(chunk_size >= 0, "scheduler: chunk_size must be >= 0 (0 = no limit; got {})", chunk_size);
}

kernels::StepBatch StepPlan::batch() const {
  kernels::StepBatch b;
  b.n_tokens = n_tokens();
  b.positions = positions.data();
  b.seq_of_token = seq_of_token.data();
  b.slots = slots.data();
  b.n_seqs = n_table_rows;
  b.max_blocks = max_blocks;
  b.block_tables = block_tables.data();
  b.numerics = numerics;
  return b;
}

Scheduler::Scheduler(const SchedulerConfig& config) : config_(config), kv_(config.kv) {
  config_.validate();
}

Sequence& Scheduler::seq(SeqId id) {
  auto it = seqs_.find(id);
  check(it != seqs_.end(), "scheduler: unknown sequence {}", id);
  return it->second;
}

const Sequence& Scheduler::sequence(SeqId id) const {
  auto it = seqs_.find(id);
  check(it != seqs_.end(), "scheduler: unknown sequence {}", id);
  return it->second;
}

SeqId Scheduler::add(std::vector<int32_t> prompt, const SequenceOptions& options) {
  check(!prompt.empty(), "scheduler: a request needs at least one prompt token");
  check(options.max_new_tokens >= 0, "scheduler: max_new_tokens must be >= 0 (got {})",
        options.max_new_tokens);
  const int64_t need = static_cast<int64_t>(prompt.size()) + options.max_new_tokens;
  check(need <= config_.kv.capacity_tokens(),
        "request rejected: it needs KV for up to {} tokens (prompt {} + max_new_tokens {}) but "
        "the KV pool holds {} ({} blocks of {}); shorten the prompt, lower max_tokens, or give "
        "the KV cache more memory",
        need, prompt.size(), options.max_new_tokens, config_.kv.capacity_tokens(),
        config_.kv.n_blocks, config_.kv.block_size);
  Sequence s;
  s.id = next_id_++;
  s.n_prompt = static_cast<int32_t>(prompt.size());
  s.tokens = std::move(prompt);
  s.n_committed = s.n_prompt;
  s.options = options;
  s.status = SeqStatus::kWaiting;
  const SeqId id = s.id;
  if (s.options.isolated) ++n_isolated_;
  seqs_.emplace(id, std::move(s));
  waiting_.push_back(id);
  ++stats_.n_added;
  return id;
}

SeqId Scheduler::fork(SeqId parent_id) {
  const Sequence& parent = sequence(parent_id);
  check(parent.n_in_flight == 0,
        "scheduler: cannot fork sequence {} while it is in flight; call complete_step() first",
        parent_id);
  Sequence c;
  c.id = next_id_++;
  c.tokens = parent.tokens;
  c.n_prompt = parent.n_prompt;
  c.options = parent.options;
  c.status = parent.status;
  c.n_committed = parent.n_committed;
  if (parent.status == SeqStatus::kRunning) {
    c.n_trusted = parent.n_trusted;
    c.n_computed = parent.n_computed;
    c.n_cached_tokens = parent.n_cached_tokens;
    kv_.fork(parent_id, c.id, c.n_computed);
    running_.push_back(c.id);
  } else {
    waiting_.insert(std::find(waiting_.begin(), waiting_.end(), parent_id) + 1, c.id);
  }
  const SeqId id = c.id;
  if (c.options.isolated) ++n_isolated_;
  seqs_.emplace(id, std::move(c));
  ++stats_.n_forked;
  return id;
}

void Scheduler::preempt_last_running(StepPlan& plan) {
  const SeqId id = running_.back();
  Sequence& s = seq(id);
  running_.pop_back();
  kv_.free_sequence(id);
  s.n_computed = 0;
  s.n_trusted = 0;
  s.held = false;
  // Verified mode: candidates are not recomputed — the invariant recompute of the committed
  // tokens samples the next token itself.
  if (s.options.speculative) s.tokens.resize(static_cast<size_t>(s.n_committed));
  s.status = SeqStatus::kWaiting;
  ++s.n_preemptions;
  waiting_.push_front(id);
  plan.preempted.push_back(id);
  ++stats_.n_preemptions;
}

StepPlan Scheduler::schedule() {
  check(n_in_flight_ == 0,
        "scheduler: schedule() called while {} sequences of the previous plan are in flight; "
        "call complete_step() first",
        n_in_flight_);
  StepPlan plan;
  plan.step = stats_.n_steps++;
  std::vector<std::pair<SeqId, int32_t>> picks;  // (sequence, tokens) in plan order
  if (n_isolated_ > 0) {
    schedule_isolated(plan, picks);
  } else {
    schedule_batched(plan, picks, /*others_only=*/false);
  }
  build_rows(picks, plan);
  return plan;
}

PrefixMatch Scheduler::prefix_match(const Sequence& s) const {
  // all_logits: every position's logits are needed. isolated (CoRun): the prefill must be
  // whole, so a cache hit would change its shape (the peers turn the cache off).
  if (s.options.all_logits || s.options.isolated) return {};
  return kv_.match_prefix(s.tokens, s.options.numerics_class);
}

int32_t Scheduler::chunk_limit(int32_t want, int32_t budget) const {
  want = std::min(want, budget);
  if (config_.chunk_size > 0) want = std::min(want, config_.chunk_size);
  return want;
}

bool Scheduler::head_fits(const PrefixMatch& match, int32_t want) const {
  const int32_t bs = config_.kv.block_size;
  const int32_t need =
      (match.n_tokens + want + bs - 1) / bs - static_cast<int32_t>(match.blocks.size());
  return need <= kv_.n_available_blocks() - match.n_idle;
}

void Scheduler::admit(SeqId id, const PrefixMatch& match, int32_t want, StepPlan& plan,
                      std::vector<std::pair<SeqId, int32_t>>& picks) {
  Sequence& s = seq(id);
  const int32_t hit = match.n_tokens;
  waiting_.pop_front();
  kv_.add_sequence(id, s.options.numerics_class, match);
  s.status = SeqStatus::kRunning;
  s.n_computed = hit;
  s.n_trusted = hit;  // cached blocks hold trusted KV only
  s.n_cached_tokens = hit;
  running_.push_back(id);
  check(kv_.ensure_writable(id, hit, want, plan.copies),
        "scheduler: internal error: blocks for admitted sequence {} vanished", id);
  picks.emplace_back(id, want);
}

void Scheduler::schedule_batched(StepPlan& plan, std::vector<std::pair<SeqId, int32_t>>& picks,
                                 bool others_only) {
  const auto max_seqs = static_cast<size_t>(config_.max_seqs);
  int32_t budget = config_.max_tokens_per_step;
  auto clamp_chunk = [&](int32_t want) { return chunk_limit(want, budget); };

  // 1. Running sequences, oldest admission first. Victims come from the back, i.e. from
  // sequences not yet visited (or the current one), so nothing already picked is preempted.
  for (size_t i = 0; i < running_.size() && budget > 0 && picks.size() < max_seqs; ++i) {
    const SeqId id = running_[i];
    Sequence& s = seq(id);
    if (s.held) continue;  // a window waiting for its verification group
    if (others_only && s.options.isolated) continue;
    const int32_t want = clamp_chunk(s.n_uncomputed());
    if (want == 0) continue;  // waiting for append_token() or finish()
    int32_t n = kv_.max_tokens_fitting(id, s.n_computed, want);
    bool self_preempted = false;
    while (n == 0) {
      self_preempted = running_.back() == id;
      preempt_last_running(plan);
      if (self_preempted) break;
      n = kv_.max_tokens_fitting(id, s.n_computed, want);
    }
    if (self_preempted) break;  // everything after it is preempted too
    check(kv_.ensure_writable(id, s.n_computed, n, plan.copies),
          "scheduler: internal error: blocks for sequence {} vanished", id);
    picks.emplace_back(id, n);
    budget -= n;
  }

  // 2. Admission, FCFS. Not in a step that had to preempt: the pool is short. An isolated
  // head is admitted alone (schedule_isolated); the ones behind it wait for it.
  while (plan.preempted.empty() && !waiting_.empty() && budget > 0 && picks.size() < max_seqs &&
         running_.size() < max_seqs) {
    const SeqId id = waiting_.front();
    const Sequence& s = sequence(id);
    if (others_only && s.options.isolated) break;
    const PrefixMatch match = prefix_match(s);
    const int32_t want = clamp_chunk(s.n_tokens() - match.n_tokens);
    if (!head_fits(match, want)) break;  // the head waits for blocks
    admit(id, match, want, plan, picks);
    budget -= want;
  }
}

void Scheduler::build_rows(const std::vector<std::pair<SeqId, int32_t>>& picks, StepPlan& plan) {
  const int32_t bs = config_.kv.block_size;
  int32_t n_tokens = 0;
  for (const auto& [id, n] : picks) {
    const Sequence& s = seqs_.at(id);
    plan.max_blocks = std::max(plan.max_blocks, (s.n_computed + n + bs - 1) / bs);
    n_tokens += n;
  }
  plan.seqs.reserve(picks.size());
  plan.token_ids.reserve(n_tokens);
  plan.positions.reserve(n_tokens);
  plan.seq_of_token.reserve(n_tokens);
  plan.slots.reserve(n_tokens);
  // A window of drafts as decode rows: one table row per token (ScheduledSeq::decode_rows).
  auto decode_rows_of = [this](const Sequence& s, int32_t n) {
    return n > 1 && is_decode_window(s);
  };
  int32_t n_rows = 0;
  for (const auto& [id, n] : picks) n_rows += decode_rows_of(seqs_.at(id), n) ? n : 1;
  plan.n_table_rows = n_rows;
  plan.block_tables.assign(static_cast<size_t>(n_rows) * plan.max_blocks, -1);

  int32_t row = 0;
  for (const auto& [id, n] : picks) {
    Sequence& s = seq(id);
    ScheduledSeq ss;
    ss.id = id;
    ss.first_pos = s.n_computed;
    ss.n_tokens = n;
    ss.token_begin = plan.n_tokens();
    ss.sample = s.n_computed + n == s.n_tokens();
    ss.all_logits = s.options.all_logits;
    ss.decode_rows = decode_rows_of(s, n);

    std::span<const int32_t> table = kv_.block_table(id);
    const int32_t n_blocks = (s.n_computed + n + bs - 1) / bs;
    for (int32_t r = row; r < row + (ss.decode_rows ? n : 1); ++r) {
      std::copy_n(table.begin(), n_blocks,
                  plan.block_tables.begin() + static_cast<ptrdiff_t>(r) * plan.max_blocks);
    }
    for (int32_t p = s.n_computed; p < s.n_computed + n; ++p) {
      plan.token_ids.push_back(s.tokens[p]);
      plan.positions.push_back(p);
      plan.seq_of_token.push_back(ss.decode_rows ? row + p - s.n_computed : row);
      plan.slots.push_back(table[p / bs] * bs + p % bs);
    }
    row += ss.decode_rows ? n : 1;
    // Speculative: from the last committed token on, each row verifies the next candidate
    // (or samples the next token).
    const int32_t spec_first =
        s.options.speculative ? std::max(s.n_computed, s.n_committed - 1) : s.n_computed + n;
    if (ss.all_logits) {
      ss.logits_begin = static_cast<int32_t>(plan.logit_rows.size());
      ss.logits_pos = s.n_computed;
      for (int32_t t = 0; t < n; ++t) plan.logit_rows.push_back(ss.token_begin + t);
    } else if (spec_first < s.n_computed + n) {
      ss.logits_begin = static_cast<int32_t>(plan.logit_rows.size());
      ss.logits_pos = spec_first;
      for (int32_t p = spec_first; p < s.n_computed + n; ++p) {
        plan.logit_rows.push_back(ss.token_begin + p - s.n_computed);
      }
    } else if (ss.sample) {
      ss.logits_begin = static_cast<int32_t>(plan.logit_rows.size());
      ss.logits_pos = s.n_computed + n - 1;
      plan.logit_rows.push_back(ss.token_begin + n - 1);
    }
    s.n_in_flight = n;
    ++n_in_flight_;
    plan.seqs.push_back(ss);
  }
  stats_.n_scheduled_tokens += n_tokens;
}

void Scheduler::complete_step(const StepPlan& plan, bool trusted) {
  for (const ScheduledSeq& ss : plan.seqs) {
    auto it = seqs_.find(ss.id);
    if (it == seqs_.end() || it->second.n_in_flight == 0) continue;  // finished or aborted
    check(it->second.n_computed == ss.first_pos,
          "scheduler: complete_step() with a stale plan for sequence {}", ss.id);
    mark_computed(ss.id, ss.first_pos + ss.n_tokens, trusted);
  }
}

namespace {
// How many leading tokens' KV may enter the prefix cache: all computed ones, or for a
// speculative sequence the trusted KV of committed tokens.
int32_t publishable(const Sequence& s) {
  if (!s.options.speculative) return s.n_computed;
  return std::min(s.n_trusted, s.n_committed);
}
}  // namespace

void Scheduler::mark_computed(SeqId id, int32_t n_computed, bool trusted) {
  Sequence& s = seq(id);
  check(s.status == SeqStatus::kRunning && s.n_in_flight > 0,
        "scheduler: mark_computed() for sequence {} that has nothing in flight", id);
  check(n_computed >= s.n_computed && n_computed <= s.n_computed + s.n_in_flight,
        "scheduler: sequence {}: {} computed tokens is outside the scheduled range [{}, {}]", id,
        n_computed, s.n_computed, s.n_computed + s.n_in_flight);
  // Trusted: this step ran on the invariant numerics over trusted KV (and committed inputs,
  // or candidates the engine verifies before committing them).
  if (trusted && s.n_trusted == s.n_computed) s.n_trusted = n_computed;
  s.n_computed = n_computed;
  s.n_in_flight = 0;
  --n_in_flight_;
  kv_.mark_computed(id, s.tokens, publishable(s));
}

void Scheduler::commit(SeqId id, int32_t n_committed) {
  Sequence& s = seq(id);
  check(s.options.speculative && n_committed >= s.n_committed && n_committed <= s.n_tokens(),
        "scheduler: sequence {}: cannot commit {} tokens (committed {}, tokens {})", id,
        n_committed, s.n_committed, s.n_tokens());
  s.n_committed = n_committed;
  if (s.status == SeqStatus::kRunning) kv_.mark_computed(id, s.tokens, publishable(s));
}

void Scheduler::rollback(SeqId id, int32_t n_keep) {
  Sequence& s = seq(id);
  check(s.options.speculative && s.n_in_flight == 0 && n_keep >= s.n_committed &&
            n_keep <= s.n_tokens(),
        "scheduler: sequence {}: cannot roll back to {} tokens (committed {}, tokens {}{})", id,
        n_keep, s.n_committed, s.n_tokens(), s.n_in_flight > 0 ? ", in flight" : "");
  s.tokens.resize(static_cast<size_t>(n_keep));
  s.n_computed = std::min(s.n_computed, n_keep);
  s.n_trusted = std::min(s.n_trusted, n_keep);
  if (s.status == SeqStatus::kRunning) kv_.truncate(id, n_keep);
}

void Scheduler::rewind(SeqId id) {
  Sequence& s = seq(id);
  check(s.options.speculative && s.status == SeqStatus::kRunning && s.n_in_flight == 0,
        "scheduler: sequence {} cannot be rewound (not a running speculative sequence)", id);
  s.n_computed = s.n_trusted;
  s.held = false;
}

void Scheduler::append_drafts(SeqId id, std::span<const int32_t> drafts) {
  Sequence& s = seq(id);
  check(s.options.speculative && s.status == SeqStatus::kRunning && s.n_in_flight == 0 &&
            s.n_uncomputed() == 1 && s.n_committed == s.n_tokens(),
        "scheduler: sequence {} cannot take drafts (needs a running speculative sequence with "
        "only its last committed token to compute)",
        id);
  check(s.n_generated() + static_cast<int32_t>(drafts.size()) < s.options.max_new_tokens,
        "scheduler: sequence {}: {} drafts after {} generated tokens leave no room below "
        "max_new_tokens = {}",
        id, drafts.size(), s.n_generated(), s.options.max_new_tokens);
  s.tokens.insert(s.tokens.end(), drafts.begin(), drafts.end());
}

void Scheduler::set_held(SeqId id, bool held) {
  Sequence& s = seq(id);
  check(s.options.speculative && (s.status == SeqStatus::kRunning || !held),
        "scheduler: sequence {} cannot be held", id);
  s.held = held;
}

void Scheduler::append_token(SeqId id, int32_t token, bool committed) {
  Sequence& s = seq(id);
  check(s.status == SeqStatus::kRunning && s.n_in_flight == 0 && s.n_uncomputed() == 0,
        "scheduler: append_token() to sequence {} before its last token was computed", id);
  check(s.n_generated() < s.options.max_new_tokens,
        "scheduler: sequence {} already has max_new_tokens = {} generated tokens", id,
        s.options.max_new_tokens);
  if (s.options.speculative && committed) {
    check(s.n_committed == s.n_tokens(),
          "scheduler: sequence {}: a committed token after {} pending candidates", id,
          s.n_tokens() - s.n_committed);
    s.n_committed = s.n_tokens() + 1;
  }
  s.tokens.push_back(token);
}

void Scheduler::remove(SeqId id) {
  Sequence& s = seq(id);
  if (s.status == SeqStatus::kRunning) {
    kv_.free_sequence(id);
    running_.erase(std::find(running_.begin(), running_.end(), id));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  }
  if (s.n_in_flight > 0) --n_in_flight_;
  if (s.options.isolated) --n_isolated_;
  seqs_.erase(id);
}

void Scheduler::finish(SeqId id) {
  remove(id);
  ++stats_.n_finished;
}

void Scheduler::abort(SeqId id) {
  remove(id);
  ++stats_.n_aborted;
}

void Scheduler::check_consistency() const {
  kv_.check_consistency();
  const int32_t bs = config_.kv.block_size;
  check(running_.size() + waiting_.size() == seqs_.size(),
        "scheduler check: {} running + {} waiting != {} sequences", running_.size(),
        waiting_.size(), seqs_.size());
  int32_t in_flight = 0, isolated = 0;
  for (const auto& [id, s] : seqs_) {
    isolated += s.options.isolated;
    check(s.id == id && s.n_prompt >= 1 && s.n_prompt <= s.n_tokens() &&
              s.n_tokens() <= s.max_tokens(),
          "scheduler check: sequence {} has bad token counts", id);
    check(s.n_computed >= 0 && s.n_in_flight >= 0 && s.n_computed + s.n_in_flight <= s.n_tokens(),
          "scheduler check: sequence {}: {} computed + {} in flight > {} tokens", id, s.n_computed,
          s.n_in_flight, s.n_tokens());
    in_flight += s.n_in_flight > 0;
    if (s.options.speculative) {
      check(s.n_committed >= s.n_prompt && s.n_committed <= s.n_tokens() &&
                s.n_trusted <= s.n_computed,
            "scheduler check: speculative sequence {}: committed {}, trusted {}, computed {}, "
            "tokens {}",
            id, s.n_committed, s.n_trusted, s.n_computed, s.n_tokens());
    }
    if (s.status == SeqStatus::kRunning) {
      check(std::count(running_.begin(), running_.end(), id) == 1,
            "scheduler check: running sequence {} is not listed once", id);
      check(kv_.has_sequence(id), "scheduler check: running sequence {} has no blocks", id);
      const auto n_blocks = static_cast<int32_t>(kv_.block_table(id).size());
      check(n_blocks * bs >= s.n_computed + s.n_in_flight,
            "scheduler check: sequence {} has {} blocks for {} tokens", id, n_blocks,
            s.n_computed + s.n_in_flight);
    } else {
      check(std::count(waiting_.begin(), waiting_.end(), id) == 1,
            "scheduler check: waiting sequence {} is not queued once", id);
      check(!kv_.has_sequence(id) && s.n_computed == 0 && s.n_in_flight == 0,
            "scheduler check: waiting sequence {} holds KV state", id);
    }
  }
  check(in_flight == n_in_flight_, "scheduler check: {} sequences in flight, counter says {}",
        in_flight, n_in_flight_);
  check(isolated == n_isolated_, "scheduler check: {} isolated sequences, counter says {}",
        isolated, n_isolated_);
}

}  // namespace detllm::engine
