// The engine thread: drains submitted commands between steps, runs steps while there is work,
// turns engine callbacks into Ticket events and publishes statistics (see engine_loop.h).
#include "server/engine_loop.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "core/error.h"

namespace detllm::server {

using Clock = std::chrono::steady_clock;

bool Ticket::wait_events(std::vector<EngineEvent>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  if (events_.empty()) cv_.wait_for(lk, timeout, [&] { return !events_.empty(); });
  if (events_.empty()) return false;
  for (auto& e : events_) out.push_back(std::move(e));
  events_.clear();
  return true;
}

void Ticket::push(EngineEvent e) {
  {
    std::lock_guard lk(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_one();
  std::lock_guard lk(notify_mu_);
  if (notify_) notify_();
}

void Ticket::set_notify(std::function<void()> notify) {
  std::lock_guard lk(notify_mu_);
  notify_ = std::move(notify);
}

void Gate::release(std::exception_ptr e) {
  {
    std::lock_guard lk(mu);
    open = true;
    error = std::move(e);
  }
  cv.notify_all();
}

void Gate::wait() {
  std::unique_lock lk(mu);
  cv.wait(lk, [&] { return open; });
  if (error) std::rethrow_exception(error);
}

EngineLoop::EngineLoop(const LlamaModel& model, const engine::EngineConfig& config,
                       const Tokenizer* tokenizer,
                       const std::function<void(engine::Engine&)>& before_start,
                       const LlamaModel* draft_model)
    : model_(model),
      tokenizer_(tokenizer),
      draft_model_(draft_model),
      requested_config_(config),
      engine_(std::make_unique<engine::Engine>(model, config, tokenizer, draft_model)),
      config_(engine_->config()),
      identity_(std::make_shared<WeightIdentity>()) {
  snapshot_.kv_blocks_total = config_.scheduler.kv.n_blocks;
  if (before_start) before_start(*engine_);
  thread_ = std::thread([this] { run(); });
}

void EngineLoop::set_identity(std::shared_ptr<const WeightIdentity> identity) {
  std::lock_guard lk(mu_);
  identity_ = std::move(identity);
}

std::shared_ptr<const WeightIdentity> EngineLoop::identity() const {
  std::lock_guard lk(mu_);
  return identity_;
}

bool EngineLoop::submit_and_wait(Command c) {
  auto gate = std::make_shared<Gate>();
  {
    std::lock_guard lk(mu_);
    if (stopping_) return false;
    c.gate = gate;
    commands_.push_back(std::move(c));
    cv_.notify_one();
  }
  gate->wait();
  return true;
}

void EngineLoop::pause(PauseMode mode) {
  Command c{Command::Kind::kPause};
  c.mode = mode;
  submit_and_wait(std::move(c));  // a server shutting down has nothing left to pause
}

void EngineLoop::resume() {
  std::lock_guard lk(mu_);
  commands_.push_back(Command{Command::Kind::kResume});
  cv_.notify_one();
}

bool EngineLoop::paused() const {
  std::lock_guard lk(mu_);
  return paused_;
}

void EngineLoop::run_exclusive(const std::function<void()>& fn) {
  Command c{Command::Kind::kExclusive};
  c.fn = fn;
  check(submit_and_wait(std::move(c)), "the server is shutting down");
}

int32_t EngineLoop::reset_prefix_cache() {
  int32_t dropped = 0;
  Command c{Command::Kind::kBetweenSteps};
  c.fn = [this, &dropped] { dropped = engine_->reset_prefix_cache(); };
  check(submit_and_wait(std::move(c)), "the server is shutting down");
  return dropped;
}

void EngineLoop::rebuild_engine(std::shared_ptr<const WeightIdentity> identity) {
  // Engine thread, no request in the engine. Its totals carry over into the metrics.
  const engine::EngineStats& es = engine_->stats();
  stats_base_.n_steps += es.n_steps;
  stats_base_.n_prompt_tokens += es.n_prompt_tokens;
  stats_base_.n_generated_tokens += es.n_generated_tokens;
  stats_base_.n_draft_tokens += es.n_draft_tokens;
  stats_base_.n_accepted_draft_tokens += es.n_accepted_draft_tokens;
  stats_base_.n_drafts += es.n_drafts;
  engine::EngineStats::add_per_pos(stats_base_.n_accepted_draft_tokens_per_pos,
                                   es.n_accepted_draft_tokens_per_pos);
  const engine::KvCacheStats kv = engine_->scheduler().kv_cache().stats();
  prefix_query_base_ += kv.n_query_tokens;
  prefix_hit_base_ += kv.n_hit_tokens;
  engine_.reset();  // its KV pool first: the new one takes the same memory
  engine_ = std::make_unique<engine::Engine>(model_, requested_config_, tokenizer_, draft_model_);
  std::lock_guard lk(mu_);
  identity_ = std::move(identity);
}

EngineLoop::~EngineLoop() {
  stop();
}

std::shared_ptr<Ticket> EngineLoop::submit(std::vector<engine::Request> requests) {
  auto t = std::make_shared<Ticket>();
  t->n_requests_ = requests.size();
  t->requests_ = std::move(requests);
  {
    std::lock_guard lk(mu_);
    if (!stopping_) {
      ++n_tickets_;
      commands_.push_back({Command::Kind::kAdd, t});
      cv_.notify_one();
      return t;
    }
  }
  EngineEvent e;
  e.kind = EngineEvent::Kind::kRejected;
  e.error = "the server is shutting down";
  e.rejection = EngineEvent::Rejection::kShuttingDown;
  t->push(std::move(e));
  return t;
}

void EngineLoop::cancel(const std::shared_ptr<Ticket>& ticket) {
  if (ticket->cancelled_.exchange(true)) return;
  std::lock_guard lk(mu_);
  commands_.push_back({Command::Kind::kCancel, ticket});
  cv_.notify_one();
}

void EngineLoop::cancel_all() {
  std::lock_guard lk(mu_);
  for (auto& c : commands_) {
    if (c.ticket) c.ticket->cancelled_ = true;
  }
  commands_.push_back({Command::Kind::kCancelAll, nullptr});
  cv_.notify_one();
}

void EngineLoop::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

EngineSnapshot EngineLoop::snapshot() const {
  std::lock_guard lk(mu_);
  return snapshot_;
}

void EngineLoop::add(const std::shared_ptr<Ticket>& t) {
  if (t->cancelled()) {
    --n_tickets_;
    return;
  }
  Ticket* tp = t.get();
  try {
    for (size_t i = 0; i < t->requests_.size(); ++i) {
      const auto p = static_cast<int32_t>(i);
      engine::RequestCallbacks cb;
      cb.on_token = [this, tp, p](const engine::TokenEvent& ev) {
        EngineEvent e;
        e.kind = EngineEvent::Kind::kToken;
        e.prompt_index = p;
        e.token = ev;
        deliver(tp, std::move(e));
      };
      cb.on_prompt_logprobs = [this, tp, p](std::span<const engine::PromptLogprob> lps) {
        EngineEvent e;
        e.kind = EngineEvent::Kind::kPromptLogprobs;
        e.prompt_index = p;
        e.prompt_logprobs.assign(lps.begin(), lps.end());
        deliver(tp, std::move(e));
      };
      cb.on_finish = [this, tp, p](int32_t sample, engine::FinishReason reason,
                                   const engine::Usage& usage) {
        --tp->n_live_samples_;
        EngineEvent e;
        e.kind = EngineEvent::Kind::kFinish;
        e.prompt_index = p;
        e.sample_index = sample;
        e.reason = reason;
        e.usage = usage;
        deliver(tp, std::move(e));
      };
      const int32_t n = t->requests_[i].n;
      t->ids_.push_back(engine_->add_request(std::move(t->requests_[i]), std::move(cb)));
      t->n_live_samples_ += n;
    }
  } catch (const std::exception& ex) {
    // All or nothing: the requests already added are withdrawn, and their abort events
    // dropped, so the client sees one rejection.
    for (engine::RequestId id : t->ids_) engine_->abort(id);
    std::erase_if(outbox_, [tp](const auto& te) { return te.first == tp; });
    t->ids_.clear();
    t->n_live_samples_ = 0;
    --n_tickets_;  // before the client can see the rejection
    EngineEvent e;
    e.kind = EngineEvent::Kind::kRejected;
    e.error = ex.what();
    if (dynamic_cast<const engine::SelfCheckRefusal*>(&ex) != nullptr) {
      e.rejection = EngineEvent::Rejection::kSelfCheckFailed;
    }
    t->push(std::move(e));
    return;
  }
  t->requests_.clear();
  EngineEvent e;
  e.kind = EngineEvent::Kind::kAccepted;
  {
    std::lock_guard lk(mu_);
    e.identity = identity_;
  }
  deliver(tp, std::move(e));
  live_.push_back(t);
}

void EngineLoop::cancel_now(const std::shared_ptr<Ticket>& t) {
  if (t->n_live_samples_ <= 0) return;  // finished (or not added yet: add() skips it)
  for (engine::RequestId id : t->ids_) engine_->abort(id);
  ++n_aborted_;
}

void EngineLoop::fail_all(const std::string& why) {
  ++n_engine_errors_;
  std::fprintf(stderr, "detllm serve: engine step failed: %s\n", why.c_str());
  for (auto& t : live_) {
    for (engine::RequestId id : t->ids_) {
      try {
        engine_->abort(id);
      } catch (const std::exception&) {
      }
    }
    t->n_live_samples_ = 0;
    EngineEvent e;
    e.kind = EngineEvent::Kind::kRejected;
    e.error = "internal engine error: " + why;
    deliver(t.get(), std::move(e));
  }
}

void EngineLoop::deliver(Ticket* t, EngineEvent e) {
  outbox_.emplace_back(t, std::move(e));
}

void EngineLoop::mark_scheduled(int64_t t0_ns) {
  for (const auto& t : live_) {
    if (t->scheduled_ns_.load() != 0) continue;
    for (engine::RequestId id : t->ids_) {
      // Running now, or already finished (unknown): it was scheduled in this step.
      if (engine_->status(id).state != engine::RequestStatus::State::kWaiting) {
        t->scheduled_ns_ = t0_ns;
        break;
      }
    }
  }
}

void EngineLoop::flush_outbox() {
  for (auto& [t, e] : outbox_) t->push(std::move(e));
  outbox_.clear();
}

void EngineLoop::publish(double step_seconds, bool stepped) {
  const engine::Scheduler& s = engine_->scheduler();
  const engine::KvCacheStats kv = s.kv_cache().stats();
  const engine::EngineStats& es = engine_->stats();
  std::lock_guard lk(mu_);
  EngineSnapshot& out = snapshot_;
  int32_t n_pending = 0;
  for (const auto& c : commands_) n_pending += c.kind == Command::Kind::kAdd;
  out.n_waiting = s.n_waiting() + n_pending + static_cast<int32_t>(held_.size());
  out.n_running = s.n_running();
  out.n_tickets = n_tickets_.load();
  out.kv_blocks_total = kv.n_blocks;
  out.kv_blocks_used = kv.n_referenced;
  out.kv_blocks_cached = kv.n_cached_idle;
  out.prefix_query_tokens = prefix_query_base_ + kv.n_query_tokens;
  out.prefix_hit_tokens = prefix_hit_base_ + kv.n_hit_tokens;
  out.n_prompt_tokens = stats_base_.n_prompt_tokens + es.n_prompt_tokens;
  out.n_generated_tokens = stats_base_.n_generated_tokens + es.n_generated_tokens;
  out.n_draft_tokens = stats_base_.n_draft_tokens + es.n_draft_tokens;
  out.n_accepted_draft_tokens = stats_base_.n_accepted_draft_tokens + es.n_accepted_draft_tokens;
  out.n_drafts = stats_base_.n_drafts + es.n_drafts;
  out.n_accepted_draft_tokens_per_pos = stats_base_.n_accepted_draft_tokens_per_pos;
  engine::EngineStats::add_per_pos(out.n_accepted_draft_tokens_per_pos,
                                   es.n_accepted_draft_tokens_per_pos);
  out.n_steps = stats_base_.n_steps + es.n_steps;
  out.n_aborted = n_aborted_;
  out.n_engine_errors = n_engine_errors_;
  if (stepped) {
    size_t b = 0;
    while (b < EngineSnapshot::kStepBuckets.size() &&
           step_seconds > EngineSnapshot::kStepBuckets[b]) {
      ++b;
    }
    // Cumulative buckets: every bucket from b up counts this step.
    for (size_t j = b; j < out.step_buckets.size(); ++j) ++out.step_buckets[j];
    out.step_seconds_sum += step_seconds;
  }
}

void EngineLoop::release_held() {
  if (!admitting()) return;
  while (!held_.empty()) {
    std::shared_ptr<Ticket> t = std::move(held_.front());
    held_.pop_front();
    add(t);
  }
}

void EngineLoop::settle() {
  const bool empty = live_.empty();
  if (pause_gate_ && (pause_mode_ == PauseMode::kKeep || empty)) {
    // abort: the aborted requests have finished; wait: the in-flight ones have; keep: no
    // step runs from now on.
    std::lock_guard lk(mu_);
    pause_gate_->release();
    pause_gate_.reset();
  }
  if (!exclusive_) return;
  if (!empty && paused_ && pause_mode_ == PauseMode::kKeep) {
    exclusive_gate_->release(std::make_exception_ptr(Error(fmt::format(
        "{} request(s) are held mid-generation by a keep-mode pause: their tokens so far come "
        "from the current weights, so the weights cannot change under them; pause with "
        "mode=wait (they finish first) or mode=abort before updating",
        live_.size()))));
  } else if (empty) {
    std::exception_ptr err;
    try {
      exclusive_fn_();
    } catch (...) {
      err = std::current_exception();
    }
    exclusive_gate_->release(err);
  } else {
    return;  // the requests in flight finish first
  }
  exclusive_ = false;
  exclusive_gate_.reset();
  exclusive_fn_ = nullptr;
  release_held();
  publish(0.0, false);
}

void EngineLoop::run() {
  for (;;) {
    std::deque<Command> cmds;
    {
      std::unique_lock lk(mu_);
      // A keep-mode pause freezes the requests in the engine: no step until resume.
      cv_.wait(lk, [&] {
        return stopping_ || !commands_.empty() ||
               (engine_->has_work() && !(paused_ && pause_mode_ == PauseMode::kKeep));
      });
      if (stopping_) break;
      cmds.swap(commands_);
    }
    for (auto& c : cmds) {
      switch (c.kind) {
        case Command::Kind::kAdd:
          if (admitting()) {
            add(c.ticket);
          } else {
            held_.push_back(c.ticket);
          }
          break;
        case Command::Kind::kCancel:
          cancel_now(c.ticket);
          break;
        case Command::Kind::kCancelAll:
          for (auto& t : live_) cancel_now(t);
          for (auto& t : held_) t->cancelled_ = true;  // add() drops them on release
          break;
        case Command::Kind::kPause: {
          std::lock_guard lk(mu_);
          paused_ = true;
          pause_mode_ = c.mode;
          if (pause_gate_) pause_gate_->release();  // an earlier pause is superseded
          pause_gate_ = c.gate;
          if (c.mode == PauseMode::kAbort) {
            for (auto& t : live_) cancel_now(t);
          }
          break;
        }
        case Command::Kind::kResume: {
          {
            std::lock_guard lk(mu_);
            paused_ = false;
            if (pause_gate_) pause_gate_->release();
            pause_gate_.reset();
          }
          release_held();
          break;
        }
        case Command::Kind::kExclusive:
          if (exclusive_) {
            // One at a time (the HTTP layer serializes them): refuse the second.
            c.gate->release(std::make_exception_ptr(
                Error("another weight update is being applied: retry when it has finished")));
            break;
          }
          exclusive_ = true;
          exclusive_gate_ = c.gate;
          exclusive_fn_ = std::move(c.fn);
          break;
        case Command::Kind::kBetweenSteps:
          try {
            c.fn();
            c.gate->release();
          } catch (...) {
            c.gate->release(std::current_exception());
          }
          break;
      }
    }
    double seconds = 0.0;
    bool stepped = false;
    const auto t_step = Clock::now();
    if (engine_->has_work() && !(paused_ && pause_mode_ == PauseMode::kKeep)) {
      const auto t0 = t_step;
      try {
        stepped = engine_->step();
      } catch (const std::exception& e) {
        fail_all(e.what());
      }
      seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    if (stepped) {
      mark_scheduled(std::chrono::duration_cast<std::chrono::nanoseconds>(
                         t_step.time_since_epoch()).count());
    }
    // Tickets whose samples have all finished leave the loop. The snapshot is published
    // before this iteration's events are delivered, so a client that has seen its response
    // end reads metrics that count it as finished.
    const auto done = std::stable_partition(live_.begin(), live_.end(),
                                            [](const auto& t) { return t->n_live_samples_ > 0; });
    n_tickets_ -= static_cast<int32_t>(live_.end() - done);
    publish(seconds, stepped);
    flush_outbox();
    live_.erase(done, live_.end());
    settle();
    if (!stepped && engine_->has_work() && !(paused_ && pause_mode_ == PauseMode::kKeep)) {
      // Nothing could be scheduled (should not happen: the scheduler is live); do not spin.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  // Stopping: abort whatever runs, reject whatever waits.
  if (pause_gate_) pause_gate_->release();
  if (exclusive_gate_) {
    exclusive_gate_->release(std::make_exception_ptr(Error("the server is shutting down")));
  }
  for (auto& t : held_) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kRejected;
    e.error = "the server is shutting down";
    e.rejection = EngineEvent::Rejection::kShuttingDown;
    t->push(std::move(e));
    --n_tickets_;
  }
  held_.clear();
  for (auto& t : live_) cancel_now(t);
  n_tickets_ -= static_cast<int32_t>(live_.size());
  flush_outbox();
  live_.clear();
  std::deque<Command> cmds;
  {
    std::lock_guard lk(mu_);
    cmds.swap(commands_);
  }
  for (auto& c : cmds) {
    if (c.kind != Command::Kind::kAdd) continue;
    EngineEvent e;
    e.kind = EngineEvent::Kind::kRejected;
    e.error = "the server is shutting down";
    e.rejection = EngineEvent::Rejection::kShuttingDown;
    c.ticket->push(std::move(e));
    --n_tickets_;
  }
  publish(0.0, false);
}

}  // namespace detllm::server
