// One replayed execution of the model checker (model_check.h): a fresh Engine over the abstract
// backend, the events applied to it, and the checks after each of them. The engine cannot be
// cloned, so the explorer builds one of these per node and replays the node's events.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "kernels/sampling/sampler.h"
#include "model/llama_model.h"
#include "verify/model_check/hash_backend.h"
#include "verify/model_check/model_check.h"

namespace detllm::model_check {

// What every run of one bound shares: the abstract model, the reference values of every token
// prefix met (memoised) and each request's reference output per sample.
class CheckContext {
 public:
  // backend: nullptr for HashOps(bounds.n_layers).
  CheckContext(const ModelCheckBounds& bounds, std::unique_ptr<HashOps> backend);
  const ModelCheckBounds& bounds() const { return bounds_; }
  HashOps& ops() { return *ops_; }
  const LlamaModel& model() const { return *model_; }
  const ReferenceValues& reference(const std::vector<int32_t>& tokens);
  // The tokens sample s of request k generates when every row reads its own prefix's KV
  // (stop token included), and whether a stop token ended it.
  struct Stream {
    std::vector<int32_t> tokens;
    bool stopped = false;
  };
  const Stream& stream(size_t request, int32_t sample) const { return streams_[request][sample]; }
  SamplingParams sampling(size_t request) const;

 private:
  ModelCheckBounds bounds_;
  std::unique_ptr<HashOps> ops_;
  std::unique_ptr<LlamaModel> model_;
  std::map<std::vector<int32_t>, ReferenceValues> refs_;
  std::vector<std::vector<Stream>> streams_;  // (requests, n)
};

enum class EventKind : uint8_t { kArrive, kStep, kAbort };
struct Event {
  EventKind kind = EventKind::kStep;
  int32_t request = -1;  // kArrive, kAbort: index into the bound's requests
  std::string name() const;
};

class EngineRun {
 public:
  EngineRun(CheckContext& ctx, const EngineShape& shape);
  ~EngineRun();

  // Applies one event; returns the first violation it reveals (checks after a step: rows,
  // KV, block accounting, cache contents, emitted tokens).
  std::optional<std::string> apply(const Event& e);
  // Steps until idle (at most bounds.drain_steps steps), checking each step, then the end of
  // the path: every request finished, every block free or cached idle. trace gets the steps.
  std::optional<std::string> drain(std::vector<std::string>& trace);
  // The events enabled now (arrivals of requests not yet arrived, a step when there is work,
  // aborts of live requests while the path has aborts left).
  std::vector<Event> enabled() const;
  // The engine's observable state (engine_state.cpp), canonical across SeqId numbering.
  uint64_t state_hash() const;
  void add_coverage(Coverage& c) const;

 private:
  std::optional<std::string> check_step();
  std::optional<std::string> check_blocks() const;
  std::optional<std::string> check_kv() const;
  std::optional<std::string> check_cached_blocks() const;
  std::optional<std::string> check_end() const;
  // Scheduler::check_consistency (KvCacheManager's included), after the checker's own checks.
  std::optional<std::string> check_engine_consistency() const;
  // The request (index into the bound) a sequence belongs to, and its sample rank.
  std::pair<int32_t, int32_t> owner(engine::SeqId id) const;

  CheckContext& ctx_;
  EngineShape shape_;
  std::unique_ptr<engine::Engine> engine_;
  int32_t n_aborts_ = 0;
  int64_t n_stops_ = 0;
  int64_t n_chunked_ = 0;
  int64_t n_forks_ = 0;
  std::vector<engine::RequestId> ids_;                   // (requests) -1 until arrived
  std::vector<bool> aborted_;                            // (requests)
  std::vector<std::vector<std::vector<int32_t>>> out_;   // (requests, n) emitted tokens
  std::vector<std::vector<engine::FinishReason>> done_;  // (requests, n)
  std::optional<std::string> violation_;                 // from a callback
  // The last step's logit rows: the prefix each row's value must be the reference of.
  struct LogitRow {
    std::vector<int32_t> prefix;  // tokens[0 … pos]
  };
  std::vector<LogitRow> logit_rows_;
  NumericsMode step_numerics_ = NumericsMode::kInvariant;
};

}  // namespace detllm::model_check
