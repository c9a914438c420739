// EngineLoop: the one thread that owns the Engine (which is single-threaded). HTTP threads
// submit a Ticket (one or more engine requests: the prompts of one HTTP request) through a
// locked queue and read the Ticket's events (accepted/rejected, tokens, prompt logprobs,
// finishes) as the engine produces them; cancel() aborts it (the engine frees its KV). The
// loop also publishes a snapshot of queue/KV/step statistics for /metrics.
//
//   HTTP thread ── submit(requests) ──► command queue ──► engine thread: add_request / abort
//   HTTP thread ◄── ticket.wait_events() ◄── Ticket events ◄── engine callbacks inside step()
//                                            (delivered after the step's snapshot is published)
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace detllm::server {

// Which weights a request ran on: every request is accepted under one identity and runs to
// its end on it (a weight update waits for the engine to hold no request: weight_sync.h).
struct WeightIdentity {
  std::string version = "initial";  // "initial": the weights the server loaded
  std::string fingerprint_deterministic;
  std::string fingerprint_other;
  const std::string& fingerprint(bool deterministic) const {
    return deterministic ? fingerprint_deterministic : fingerprint_other;
  }
};

// vLLM's /pause modes: in-flight requests are aborted (finish_reason "abort"), run to their
// end, or kept where they are (no step runs) until /resume. New requests wait in every mode.
enum class PauseMode : uint8_t { kAbort, kWait, kKeep };

struct EngineEvent {
  enum class Kind : uint8_t { kAccepted, kRejected, kToken, kPromptLogprobs, kFinish };
  Kind kind = Kind::kAccepted;
  int32_t prompt_index = 0;                            // which of the ticket's requests
  engine::TokenEvent token;                            // kToken
  std::vector<engine::PromptLogprob> prompt_logprobs;  // kPromptLogprobs
  int32_t sample_index = 0;                            // kFinish
  engine::FinishReason reason = engine::FinishReason::kNone;
  engine::Usage usage;
  std::string error;  // kRejected: why (detllm::Error message)
  // kAccepted: the weights every request of the ticket runs on.
  std::shared_ptr<const WeightIdentity> identity;
  // kRejected: the kind of refusal, which the HTTP layer maps to a status.
  enum class Rejection : uint8_t {
    kInvalid,          // the engine refused the request (400)
    kShuttingDown,     // the loop is stopping (503)
    kSelfCheckFailed,  // deterministic, and the startup self-check failed (503)
  };
  Rejection rejection = Rejection::kInvalid;
};

// One HTTP request's engine requests and their event channel. Events are pushed by the
// engine thread and taken by the one HTTP thread serving the request.
class Ticket {
 public:
  // Moves the pending events into `out` (appending); waits up to `timeout` when there are
  // none. Returns false when there were none.
  bool wait_events(std::vector<EngineEvent>& out, std::chrono::milliseconds timeout);
  bool cancelled() const { return cancelled_.load(); }
  // When the engine first ran one of its requests (steady_clock ns since epoch; 0 = not yet).
  int64_t scheduled_ns() const { return scheduled_ns_.load(); }
  // Called after every push (on the engine thread, outside the lock): the HTTP layer's
  // wake-up. Replacing it waits for a call in progress to return, so after
  // set_notify(nullptr) the old function is never running.
  void set_notify(std::function<void()> notify);
  size_t n_requests() const { return n_requests_; }

 private:
  friend class EngineLoop;
  void push(EngineEvent e);

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<EngineEvent> events_;
  std::mutex notify_mu_;  // held while notify_ runs
  std::function<void()> notify_;
  std::atomic<bool> cancelled_{false};
  std::atomic<int64_t> scheduled_ns_{0};
  size_t n_requests_ = 0;
  // Engine thread only:
  std::vector<engine::Request> requests_;  // until added
  std::vector<engine::RequestId> ids_;     // once added
  int32_t n_live_samples_ = 0;             // samples not finished; 0 = done
};

// Statistics for /metrics, published by the engine thread after every step.
struct EngineSnapshot {
  int32_t n_waiting = 0;  // sequences queued in the scheduler + tickets not yet added
  int32_t n_running = 0;  // sequences running
  int32_t n_tickets = 0;  // HTTP requests in the engine (queued or running)
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_used = 0;    // referenced by a sequence
  int32_t kv_blocks_cached = 0;  // idle but holding a cached prefix (evictable)
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t n_prompt_tokens = 0;  // engine totals
  int64_t n_generated_tokens = 0;
  int64_t n_draft_tokens = 0;           // speculative decoding: drafts proposed
  int64_t n_accepted_draft_tokens = 0;  // … and accepted (EngineStats)
  int64_t n_drafts = 0;                 // windows proposed
  std::vector<int64_t> n_accepted_draft_tokens_per_pos;  // [i]: windows that accepted draft i
  int64_t n_steps = 0;
  int64_t n_aborted = 0;        // tickets cancelled before finishing
  int64_t n_engine_errors = 0;  // steps that threw (their requests were failed)
  // Step wall time histogram (seconds), cumulative counts per upper bound, Prometheus style.
  static constexpr std::array<double, 13> kStepBuckets = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};
  std::array<int64_t, kStepBuckets.size() + 1> step_buckets{};  // last = +Inf
  double step_seconds_sum = 0.0;
};

// A caller of pause() or run_exclusive() waits on one until the engine thread opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::exception_ptr error;
  void release(std::exception_ptr e = nullptr);
  void wait();  // rethrows error
};

class EngineLoop {
 public:
  // Builds the Engine (throws detllm::Error on a bad config), runs before_start on it (on
  // this thread, before any request: e.g. Engine::warm_up_decode_graphs) and starts the
  // thread. The model, tokenizer and draft model (speculative method draft_model, else null)
  // must outlive the loop.
  EngineLoop(const LlamaModel& model, const engine::EngineConfig& config,
             const Tokenizer* tokenizer,
             const std::function<void(engine::Engine&)>& before_start = {},
             const LlamaModel* draft_model = nullptr);
  ~EngineLoop();  // stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues the requests of one HTTP request. The first event is kAccepted (every request was
  // added) or kRejected (none runs: a request failed validation in the engine). After stop(),
  // a ticket is rejected at once.
  std::shared_ptr<Ticket> submit(std::vector<engine::Request> requests);
  // Aborts the ticket's requests (idempotent; a finished ticket is left alone).
  void cancel(const std::shared_ptr<Ticket>& ticket);
  // Aborts every ticket.
  void cancel_all();
  // Aborts everything and joins the thread. Idempotent.
  void stop();

  // Stops admitting requests (they wait, in order, until resume()) and treats the in-flight
  // ones as `mode` says; returns once that is done (kWait: when they have finished).
  // Pausing again changes the mode. resume() admits the waiting requests and steps on.
  void pause(PauseMode mode);
  void resume();
  bool paused() const;
  // Runs fn(engine) on the engine thread while it holds no request: admissions wait, the
  // requests in flight run to their end first (unless a keep-mode pause holds them: then it
  // throws detllm::Error, as no request may see two weight versions). fn may replace the
  // engine's weights and call rebuild_engine(); its exception is rethrown here. Admissions
  // resume afterwards unless the loop is paused.
  void run_exclusive(const std::function<void()>& fn);
  // From run_exclusive's fn only: a new Engine (empty KV pool: no block of the old weights is
  // reused) and the identity new tickets are accepted under.
  void rebuild_engine(std::shared_ptr<const WeightIdentity> identity);
  // vLLM's reset_prefix_cache: between two steps, the engine forgets the cached blocks no
  // request holds (Engine::reset_prefix_cache; requests in flight go on). Returns the number of
  // blocks dropped. No bit changes: a prefix hit gives the recomputation's bits.
  int32_t reset_prefix_cache();
  // Before serving: the identity of the loaded weights. Then read by any thread.
  void set_identity(std::shared_ptr<const WeightIdentity> identity);
  std::shared_ptr<const WeightIdentity> identity() const;

  EngineSnapshot snapshot() const;
  int32_t n_tickets() const { return n_tickets_.load(); }
  // The resolved engine settings (block size, context, policy).
  const engine::EngineConfig& config() const { return config_; }

 private:
  struct Command {
    enum class Kind : uint8_t {
      kAdd,
      kCancel,
      kCancelAll,
      kPause,
      kResume,
      kExclusive,
      kBetweenSteps
    };
    Command(Kind k, std::shared_ptr<Ticket> t = nullptr) : kind(k), ticket(std::move(t)) {}
    Kind kind;
    std::shared_ptr<Ticket> ticket;
    PauseMode mode = PauseMode::kAbort;  // kPause
    std::shared_ptr<Gate> gate;          // kPause, kExclusive: the caller waits on it
    std::function<void()> fn;            // kExclusive, kBetweenSteps
  };
  // Admissions are held while paused or while an exclusive task waits for the engine to empty.
  bool admitting() const { return !paused_ && !exclusive_; }
  // Engine thread, end of an iteration: acknowledges a pause once it took effect and runs an
  // exclusive task once no request is left.
  void settle();
  void release_held();
  void run();
  void add(const std::shared_ptr<Ticket>& t);
  void cancel_now(const std::shared_ptr<Ticket>& t);
  void fail_all(const std::string& why);
  void publish(double step_seconds, bool stepped);
  // Events made on the engine thread wait in the outbox until the iteration's snapshot is
  // published (flush_outbox), so metrics never lag what a client has already seen.
  void deliver(Ticket* t, EngineEvent e);
  // Queues `c` for the engine thread with a gate and waits until the thread opens it (the
  // gate's error rethrown); false, without waiting, when the loop is stopping.
  bool submit_and_wait(Command c);
  void flush_outbox();
  // Stamps the live tickets that the step started at `t0_ns` ran for the first time.
  void mark_scheduled(int64_t t0_ns);

  const LlamaModel& model_;
  const Tokenizer* tokenizer_;
  const LlamaModel* draft_model_;          // the speculative draft model, or null
  engine::EngineConfig requested_config_;  // as given: rebuild_engine resolves it again
  std::unique_ptr<engine::Engine> engine_;
  engine::EngineConfig config_;
  std::shared_ptr<const WeightIdentity> identity_;  // guarded by mu_
  mutable std::mutex mu_;  // guards commands_, stopping_, snapshot_
  std::condition_variable cv_;
  std::deque<Command> commands_;
  bool stopping_ = false;
  EngineSnapshot snapshot_;
  std::atomic<int32_t> n_tickets_{0};
  // Engine thread only:
  std::vector<std::shared_ptr<Ticket>> live_;  // tickets added to the engine, not finished
  std::vector<std::pair<Ticket*, EngineEvent>> outbox_;  // tickets are held by live_ or a command
  int64_t n_aborted_ = 0;
  int64_t n_engine_errors_ = 0;
  std::deque<std::shared_ptr<Ticket>> held_;  // submitted while not admitting, in order
  bool paused_ = false;                        // guarded by mu_ (written on the engine thread)
  PauseMode pause_mode_ = PauseMode::kAbort;
  std::shared_ptr<Gate> pause_gate_;           // a pause() waiting for its effect
  bool exclusive_ = false;  // engine thread only
  std::shared_ptr<Gate> exclusive_gate_;
  std::function<void()> exclusive_fn_;
  // Engine totals of the engines replaced by rebuild_engine (metrics counters never go back).
  engine::EngineStats stats_base_;
  int64_t prefix_query_base_ = 0;
  int64_t prefix_hit_base_ = 0;
  std::thread thread_;
};

}  // namespace detllm::server
