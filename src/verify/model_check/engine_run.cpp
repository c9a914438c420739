// A replayed execution of the model checker and its checks (engine_run.h).
#include "verify/model_check/engine_run.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "model/synthetic.h"

namespace detllm::model_check {

using engine::FinishReason;
using engine::KvCacheManager;
using engine::Scheduler;
using engine::SeqId;
using engine::Sequence;

CheckContext::CheckContext(const ModelCheckBounds& bounds, std::unique_ptr<HashOps> backend)
    : bounds_(bounds),
      ops_(backend ? std::move(backend) : std::make_unique<HashOps>(bounds.n_layers)) {
  const ModelConfig config = hash_model_config(bounds.n_layers);
  model_ = std::make_unique<LlamaModel>(config, synthetic_recipe(config, 0), *ops_,
                                        ProjectionLayout::kFused);
  for (size_t k = 0; k < bounds.requests.size(); ++k) {
    const CheckRequest& r = bounds.requests[k];
    std::vector<Stream> per_sample;
    for (int32_t s = 0; s < r.n; ++s) {
      Stream st;
      std::vector<int32_t> seq = r.prompt;
      float logits[kHashVocab];
      for (int32_t i = 0; i < r.max_tokens; ++i) {
        logits_of(reference(seq).out.back(), logits);
        const SampleResult res =
            sample(logits, sampling(k), static_cast<int64_t>(seq.size()), static_cast<uint32_t>(s));
        seq.push_back(res.token);
        st.tokens.push_back(res.token);
        if (std::count(r.stop_token_ids.begin(), r.stop_token_ids.end(), res.token) != 0) {
          st.stopped = true;
          break;
        }
      }
      per_sample.push_back(std::move(st));
    }
    streams_.push_back(std::move(per_sample));
  }
}

const ReferenceValues& CheckContext::reference(const std::vector<int32_t>& tokens) {
  auto it = refs_.find(tokens);
  if (it == refs_.end()) {
    it = refs_.emplace(tokens, reference_values(tokens, bounds_.n_layers)).first;
  }
  return it->second;
}

SamplingParams CheckContext::sampling(size_t request) const {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = bounds_.requests[request].seed;
  return p;
}

std::string Event::name() const {
  switch (kind) {
    case EventKind::kArrive:
      return fmt::format("arrive R{}", request);
    case EventKind::kAbort:
      return fmt::format("abort R{}", request);
    case EventKind::kStep:
      break;
  }
  return "step";
}

EngineRun::EngineRun(CheckContext& ctx, const EngineShape& shape) : ctx_(ctx), shape_(shape) {
  const ModelCheckBounds& b = ctx.bounds();
  engine::EngineConfig config;
  config.scheduler.kv.block_size = b.block_size;
  config.scheduler.kv.n_blocks = b.n_blocks;
  config.scheduler.kv.enable_prefix_cache = b.prefix_cache;
  config.scheduler.max_tokens_per_step = shape.max_tokens_per_step;
  config.scheduler.chunk_size = shape.chunk_size;
  config.scheduler.max_seqs = 8;
  config.cuda_graphs = GraphMode::kOff;
  config.verify = b.verify;
  apply_mode(shape.mode, config);
  ctx.ops().forget_kv();
  engine_ = std::make_unique<engine::Engine>(ctx.model(), config.resolved(ctx.model().config()));
  const size_t n = b.requests.size();
  ids_.assign(n, -1);
  aborted_.assign(n, false);
  out_.resize(n);
  done_.resize(n);
  for (size_t k = 0; k < n; ++k) {
    out_[k].assign(static_cast<size_t>(b.requests[k].n), {});
    done_[k].assign(static_cast<size_t>(b.requests[k].n), FinishReason::kNone);
  }
  engine_->set_step_observer([this](const engine::StepView& view) {
    const engine::StepPlan& plan = view.plan;
    step_numerics_ = plan.numerics;
    logit_rows_.clear();
    for (const engine::ScheduledSeq& s : plan.seqs) {
      const Sequence& seq = engine_->scheduler().sequence(s.id);
      if (s.first_pos + s.n_tokens < seq.n_prompt && s.n_tokens > 0) ++n_chunked_;
      if (s.logits_begin < 0) continue;
      // A speculative sequence's rows over untrusted KV (a candidate's decode, even in an
      // invariant step) are candidates: the verification checks them, not the reference.
      if (seq.options.speculative && seq.n_trusted < s.first_pos) continue;
      // Rows logits_begin … cover positions logits_pos … first_pos + n_tokens - 1.
      for (int32_t pos = s.logits_pos; pos < s.first_pos + s.n_tokens; ++pos) {
        const size_t row = static_cast<size_t>(s.logit_row(pos));
        if (logit_rows_.size() <= row) logit_rows_.resize(row + 1);
        logit_rows_[row].prefix.assign(seq.tokens.begin(), seq.tokens.begin() + pos + 1);
      }
    }
  });
}

EngineRun::~EngineRun() = default;

std::vector<Event> EngineRun::enabled() const {
  std::vector<Event> events;
  for (size_t k = 0; k < ids_.size(); ++k) {
    if (ids_[k] < 0) events.push_back({EventKind::kArrive, static_cast<int32_t>(k)});
  }
  if (engine_->has_work()) events.push_back({EventKind::kStep, -1});
  if (n_aborts_ < ctx_.bounds().max_aborts) {
    for (size_t k = 0; k < ids_.size(); ++k) {
      if (ids_[k] >= 0 &&
          engine_->status(ids_[k]).state != engine::RequestStatus::State::kUnknown) {
        events.push_back({EventKind::kAbort, static_cast<int32_t>(k)});
      }
    }
  }
  return events;
}

std::optional<std::string> EngineRun::apply(const Event& e) {
  try {
    switch (e.kind) {
      case EventKind::kArrive: {
        const size_t k = static_cast<size_t>(e.request);
        const CheckRequest& cr = ctx_.bounds().requests[k];
        engine::Request r;
        r.prompt = cr.prompt;
        r.sampling = ctx_.sampling(k);
        r.max_tokens = cr.max_tokens;
        r.n = cr.n;
        r.stop_token_ids = cr.stop_token_ids;
        r.deterministic = true;
        engine::RequestCallbacks cb;
        cb.on_token = [this, k](const engine::TokenEvent& ev) {
          auto& out = out_[k][static_cast<size_t>(ev.sample_index)];
          const CheckContext::Stream& ref = ctx_.stream(k, ev.sample_index);
          const size_t i = out.size();
          out.push_back(ev.token);
          const int32_t want_pos =
              static_cast<int32_t>(ctx_.bounds().requests[k].prompt.size() + i);
          if (violation_) return;
          if (i >= ref.tokens.size() || ref.tokens[i] != ev.token || ev.position != want_pos) {
            violation_ = fmt::format(
                "R{} sample {} emitted token {} at position {}; the reference gives {} at {}", k,
                ev.sample_index, ev.token, ev.position,
                i < ref.tokens.size() ? fmt::format("{}", ref.tokens[i]) : "nothing", want_pos);
          }
        };
        cb.on_finish = [this, k](int32_t s, FinishReason reason, const engine::Usage&) {
          done_[k][static_cast<size_t>(s)] = reason;
          if (reason == FinishReason::kStop) ++n_stops_;
          if (violation_ || reason == FinishReason::kAbort) return;
          const CheckContext::Stream& ref = ctx_.stream(k, s);
          const bool want_stop = ref.stopped;
          if (out_[k][static_cast<size_t>(s)] != ref.tokens ||
              (reason == FinishReason::kStop) != want_stop) {
            violation_ = fmt::format(
                "R{} sample {} finished ({}) after {} tokens; the reference "
                "ends with {} after {}",
                k, s, engine::finish_reason_name(reason), out_[k][static_cast<size_t>(s)].size(),
                want_stop ? "a stop token" : "max_tokens", ref.tokens.size());
          }
        };
        ids_[k] = engine_->add_request(std::move(r), std::move(cb));
        if (cr.n > 1) n_forks_ += cr.n - 1;
        break;
      }
      case EventKind::kAbort:
        engine_->abort(ids_[static_cast<size_t>(e.request)]);
        aborted_[static_cast<size_t>(e.request)] = true;
        ++n_aborts_;
        break;
      case EventKind::kStep:
        logit_rows_.clear();
        if (!engine_->step())
          return "liveness: the engine has work but its step ran nothing (stuck)";
        return check_step();
    }
    if (auto v = check_blocks()) return v;
    if (violation_) return violation_;
    if (auto v = check_kv()) return v;
    return check_engine_consistency();
  } catch (const Error& err) {
    return fmt::format("the engine threw: {}", err.what());
  }
}

std::optional<std::string> EngineRun::drain(std::vector<std::string>& trace) {
  int32_t n = 0;
  while (engine_->has_work()) {
    if (n == ctx_.bounds().drain_steps) {
      return fmt::format("liveness: requests still live after {} drained steps", n);
    }
    ++n;
    trace.push_back("step (drain)");
    if (auto v = apply({EventKind::kStep, -1})) return v;
  }
  return check_end();
}

// Structure first (the cause: a block shared by two prefixes), then values (its symptom: a row
// that read the wrong KV), then the engine's own accounting checks.
std::optional<std::string> EngineRun::check_step() {
  if (auto v = check_blocks()) return v;
  // Rows of an invariant step read KV bound to their prefix: their values are the reference's.
  if (step_numerics_ == NumericsMode::kInvariant) {
    const std::span<const uint64_t> got = ctx_.ops().logit_values();
    for (size_t row = 0; row < logit_rows_.size(); ++row) {
      const std::vector<int32_t>& prefix = logit_rows_[row].prefix;
      if (prefix.empty()) continue;
      const uint64_t want = ctx_.reference(prefix).out.back();
      if (row >= got.size() || got[row] != want) {
        return fmt::format(
            "logit row {} (position {}, prefix {}) holds {:x}; its prefix gives {:x}", row,
            prefix.size() - 1, fmt::join(prefix, " "), row < got.size() ? got[row] : 0, want);
      }
    }
  }
  if (violation_) return violation_;  // emitted tokens, checked by the callbacks
  if (auto v = check_kv()) return v;
  if (auto v = check_cached_blocks()) return v;
  return check_engine_consistency();
}

std::optional<std::string> EngineRun::check_engine_consistency() const {
  try {
    engine_->scheduler().check_consistency();
  } catch (const Error& err) {
    return fmt::format("engine consistency check: {}", err.what());
  }
  return std::nullopt;
}

std::pair<int32_t, int32_t> EngineRun::owner(SeqId id) const {
  const Scheduler& sch = engine_->scheduler();
  const Sequence& s = sch.sequence(id);
  for (size_t k = 0; k < ctx_.bounds().requests.size(); ++k) {
    const std::vector<int32_t>& p = ctx_.bounds().requests[k].prompt;
    if (s.n_prompt != static_cast<int32_t>(p.size()) ||
        !std::equal(p.begin(), p.end(), s.tokens.begin())) {
      continue;
    }
    int32_t rank = 0;  // samples are added in index order: rank by id among the request's
    auto count = [&](SeqId other) {
      const Sequence& o = sch.sequence(other);
      if (other < id && o.n_prompt == s.n_prompt &&
          std::equal(p.begin(), p.end(), o.tokens.begin())) {
        ++rank;
      }
    };
    for (SeqId o : sch.running()) count(o);
    for (SeqId o : sch.waiting()) count(o);
    return {static_cast<int32_t>(k), rank};
  }
  return {-1, -1};
}

// Ref counts and lists against the block tables; a shared block holds one prefix at one place.
std::optional<std::string> EngineRun::check_blocks() const {
  const Scheduler& sch = engine_->scheduler();
  const KvCacheManager& kv = sch.kv_cache();
  const int32_t n = kv.config().n_blocks;
  const int32_t bs = kv.block_size();
  std::vector<int32_t> refs(static_cast<size_t>(n), 0);
  struct Holder {
    SeqId seq = -1;
    int32_t logical = -1;
  };
  std::vector<Holder> first(static_cast<size_t>(n));
  std::vector<SeqId> live(sch.running().begin(), sch.running().end());
  live.insert(live.end(), sch.waiting().begin(), sch.waiting().end());
  for (SeqId id : live) {
    if (!kv.has_sequence(id)) continue;
    const Sequence& s = sch.sequence(id);
    const std::span<const int32_t> table = kv.block_table(id);
    for (size_t j = 0; j < table.size(); ++j) {
      const int32_t b = table[j];
      ++refs[static_cast<size_t>(b)];
      Holder& h = first[static_cast<size_t>(b)];
      if (h.seq < 0) {
        h = {id, static_cast<int32_t>(j)};
        continue;
      }
      if (h.logical != static_cast<int32_t>(j)) {
        return fmt::format("block {} is logical block {} of seq {} and {} of seq {}", b, h.logical,
                           h.seq, j, id);
      }
      // Both hold the block's KV: their valid tokens up to its end must agree.
      const Sequence& o = sch.sequence(h.seq);
      auto valid = [](const Sequence& q) {
        return q.options.speculative ? q.n_trusted : q.n_computed;
      };
      const int32_t end = std::min({static_cast<int32_t>(j + 1) * bs, valid(s), valid(o)});
      if (!std::equal(s.tokens.begin(), s.tokens.begin() + std::max(end, 0), o.tokens.begin())) {
        return fmt::format("block {} is shared by seq {} and seq {} whose prefixes differ", b,
                           h.seq, id);
      }
    }
  }
  int32_t n_free = 0, n_idle = 0;
  for (int32_t b = 0; b < n; ++b) {
    if (kv.ref_count(b) != refs[static_cast<size_t>(b)]) {
      return fmt::format("block {} has ref count {} but {} tables hold it", b, kv.ref_count(b),
                         refs[static_cast<size_t>(b)]);
    }
  }
  std::vector<char> listed(static_cast<size_t>(n), 0);
  for (int32_t b : kv.free_list()) {
    if (refs[static_cast<size_t>(b)] != 0 || kv.is_cached(b) || listed[static_cast<size_t>(b)]) {
      return fmt::format("block {} is on the free list but held, cached or listed twice", b);
    }
    listed[static_cast<size_t>(b)] = 1;
    ++n_free;
  }
  for (int32_t b : kv.lru_order()) {
    if (refs[static_cast<size_t>(b)] != 0 || !kv.is_cached(b) || listed[static_cast<size_t>(b)]) {
      return fmt::format("block {} is evictable but held, uncached or listed twice", b);
    }
    listed[static_cast<size_t>(b)] = 1;
    ++n_idle;
  }
  int32_t n_held = 0;
  for (int32_t b = 0; b < n; ++b) n_held += refs[static_cast<size_t>(b)] > 0;
  if (n_free + n_idle + n_held != n) {
    return fmt::format("{} free + {} evictable + {} held blocks of {}: a block is lost", n_free,
                       n_idle, n_held, n);
  }
  return std::nullopt;
}

// Every trusted computed position of every live sequence holds its prefix's KV.
std::optional<std::string> EngineRun::check_kv() const {
  const std::span<const kernels::KvCacheLayer> layers = ctx_.ops().kv_layers();
  if (layers.empty()) return std::nullopt;  // nothing computed yet
  const Scheduler& sch = engine_->scheduler();
  const KvCacheManager& kv = sch.kv_cache();
  for (SeqId id : sch.running()) {
    const Sequence& s = sch.sequence(id);
    const int32_t valid = s.options.speculative ? s.n_trusted : s.n_computed;
    if (valid == 0) continue;
    const int32_t n_slots = static_cast<int32_t>(kv.block_table(id).size()) * kv.block_size();
    if (valid > s.n_tokens()) {
      return fmt::format("seq {} counts {} positions as computed but has {} tokens", id, valid,
                         s.n_tokens());
    }
    if (valid > n_slots) {
      return fmt::format("seq {} counts position {} as {} but has no KV block for it", id, n_slots,
                         s.options.speculative ? "trusted" : "computed");
    }
    const ReferenceValues& ref =
        ctx_.reference(std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + valid));
    for (size_t l = 0; l < layers.size(); ++l) {
      for (int32_t p = 0; p < valid; ++p) {
        const uint64_t got = kv_slot_value(layers[l], kv.slot(id, p));
        if (got != ref.kv[l][static_cast<size_t>(p)]) {
          return fmt::format(
              "seq {} position {} (layer {}, slot {}) holds KV {:x}; its prefix "
              "{} gives {:x}",
              id, p, l, kv.slot(id, p), got,
              fmt::join(s.tokens.begin(), s.tokens.begin() + p + 1, " "),
              ref.kv[l][static_cast<size_t>(p)]);
        }
      }
    }
  }
  return std::nullopt;
}

// A cached block holds the KV of the prefix its key chain names (where the chain is still
// cached back to the first block: only such chains can be hit).
std::optional<std::string> EngineRun::check_cached_blocks() const {
  const std::span<const kernels::KvCacheLayer> layers = ctx_.ops().kv_layers();
  if (layers.empty()) return std::nullopt;
  const KvCacheManager& kv = engine_->scheduler().kv_cache();
  const int32_t bs = kv.block_size();
  for (int32_t b = 0; b < kv.config().n_blocks; ++b) {
    if (!kv.is_cached(b)) continue;
    std::vector<std::span<const int32_t>> chain;  // last block first
    KvCacheManager::CachedBlock c = kv.cached_block(b);
    chain.push_back(c.tokens);
    bool complete = true;
    while (!(c.parent == kRootBlockHash)) {
      const int32_t p = kv.find_cached(c.parent);
      if (p < 0) {
        complete = false;
        break;
      }
      c = kv.cached_block(p);
      chain.push_back(c.tokens);
    }
    if (!complete) continue;
    std::vector<int32_t> prefix;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      prefix.insert(prefix.end(), it->begin(), it->end());
    }
    const ReferenceValues& ref = ctx_.reference(prefix);
    const int32_t first = static_cast<int32_t>(prefix.size()) - bs;
    for (size_t l = 0; l < layers.size(); ++l) {
      for (int32_t i = 0; i < bs; ++i) {
        const uint64_t got = kv_slot_value(layers[l], b * bs + i);
        if (got != ref.kv[l][static_cast<size_t>(first + i)]) {
          return fmt::format(
              "cached block {} (prefix {}) holds KV {:x} at position {} (layer {}); "
              "its prefix gives {:x}",
              b, fmt::join(prefix, " "), got, first + i, l,
              ref.kv[l][static_cast<size_t>(first + i)]);
        }
      }
    }
  }
  return std::nullopt;
}

// The end of a path: every request finished and every block free or cached idle.
std::optional<std::string> EngineRun::check_end() const {
  for (size_t k = 0; k < ids_.size(); ++k) {
    if (ids_[k] < 0) continue;
    for (size_t s = 0; s < done_[k].size(); ++s) {
      if (done_[k][s] == FinishReason::kNone) {
        return fmt::format("liveness: R{} sample {} never finished", k, s);
      }
    }
  }
  const engine::KvCacheStats st = engine_->scheduler().kv_cache().stats();
  if (st.n_referenced != 0 || st.n_free + st.n_cached_idle != st.n_blocks) {
    return fmt::format("idle engine holds blocks: {} referenced, {} free, {} cached idle of {}",
                       st.n_referenced, st.n_free, st.n_cached_idle, st.n_blocks);
  }
  return std::nullopt;
}

void EngineRun::add_coverage(Coverage& c) const {
  const engine::SchedulerStats& s = engine_->scheduler().stats();
  const engine::KvCacheStats kv = engine_->scheduler().kv_cache().stats();
  c.steps += s.n_steps;
  c.preemptions += s.n_preemptions;
  c.prefix_hit_tokens += kv.n_hit_tokens;
  c.evictions += kv.n_evictions;
  c.block_copies += kv.n_copies;
  c.forks += s.n_forked;
  c.aborts += n_aborts_;
  c.rollbacks += engine_->stats().n_rollbacks;
  c.stops += n_stops_;
  c.chunked += n_chunked_;
}

}  // namespace detllm::model_check
