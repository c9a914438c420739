// The bounded model checker of the engine (docs/contract.md, "What is proved"): every sequence
// of events up to a bound — request arrivals (shared prefixes, n > 1 forks, stop tokens, max
// tokens), engine steps, aborts — is run on the real Engine (Scheduler, KvCacheManager, prefix
// cache, Verifier) over the abstract backend (hash_backend.h), under each engine shape (token
// budget, chunk size, mode). A small KV pool forces preemptions and evictions; the verified
// mode's fast numerics make candidates mismatch, so windows roll back.
//
// Exploration: breadth first over event sequences; the engine cannot be cloned, so each node is
// replayed from a fresh engine, and its state (engine_state.cpp) is hashed so that each state is
// expanded once. From every new state the engine is also drained (stepped until idle), so every
// path ends: that is where liveness and the final outputs are checked.
// After every step (engine_run.cpp): every trusted row and KV entry equals the reference of its
// logical prefix; ref counts, free list and LRU agree with the block tables; a shared block holds
// one prefix at one position; a cached block holds the prefix its key names; emitted tokens are
// the reference's. At the end of a path: every request finished, every block free or cached idle.
// The first violation in BFS order comes with the shortest event trace that reaches it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "determinism/policy.h"
#include "engine/engine_config.h"
#include "verify/model_check/hash_backend.h"

namespace detllm::model_check {

struct CheckRequest {
  std::vector<int32_t> prompt;  // ids < kHashVocab; prompts of a bound are distinct
  int32_t max_tokens = 2;
  int32_t n = 1;  // samples (n > 1: forks)
  std::vector<int32_t> stop_token_ids;
  uint64_t seed = 0;
};

// One engine configuration explored from the empty state.
struct EngineShape {
  int32_t max_tokens_per_step = 4;
  int32_t chunk_size = 0;  // 0: whole prompt within the budget
  DeterminismMode mode = DeterminismMode::kInvariant;
  std::string name() const;
};

struct ModelCheckBounds {
  std::vector<CheckRequest> requests;
  std::vector<EngineShape> shapes;
  int32_t block_size = 2;
  int32_t n_blocks = 8;
  int32_t n_layers = 1;
  bool prefix_cache = true;     // off: every prompt computed, no block keyed
  int32_t max_events = 10;      // events per explored path (arrivals, steps, aborts)
  int32_t max_aborts = 1;       // aborts per path
  int32_t drain_steps = 200;    // steps a drained path may take to finish (liveness bound)
  engine::VerifyConfig verify;  // the verified mode's windows and groups
  std::string describe() const;
};

// The bound CI runs (tests/model_check, `detllm check --proof`) and the larger documented one
// (`detllm check --proof --proof-bound large`).
ModelCheckBounds ci_bounds();
ModelCheckBounds large_bounds();

struct Counterexample {
  std::string shape;
  std::vector<std::string> trace;  // events, shortest first found (BFS), then drained steps
  std::string violation;
};

// What the exploration covered (summed over every replay), so a bound that exercises nothing
// is visible.
struct Coverage {
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t evictions = 0;
  int64_t block_copies = 0;  // copy-on-write after forks
  int64_t forks = 0;
  int64_t aborts = 0;
  int64_t rollbacks = 0;  // verified mode: windows that mismatched
  int64_t stops = 0;      // samples ended by a stop token
  int64_t chunked = 0;    // steps that computed part of a prompt
};

struct ShapeResult {
  std::string shape;
  int64_t states = 0;   // distinct states expanded
  int64_t replays = 0;  // event sequences run (including revisits)
  // No path was cut at max_events: every reachable state of this shape and workload was
  // explored (the bound on events did not bind).
  bool complete = true;
  double seconds = 0.0;
};

struct ModelCheckResult {
  std::vector<ShapeResult> shapes;
  int64_t states = 0;
  double seconds = 0.0;
  Coverage coverage;
  std::optional<Counterexample> counterexample;  // the first violation, if any
  bool ok() const { return !counterexample.has_value(); }
};

// Explores every shape of `bounds` (stops at the first violation). backend: the abstract
// backend to run (HashOps by default; tests pass one with a planted fault).
ModelCheckResult run_model_check(const ModelCheckBounds& bounds,
                                 std::unique_ptr<HashOps> backend = nullptr);

// The counterexample, or what was proved within which bounds (and what is assumed).
std::string format_result(const ModelCheckBounds& bounds, const ModelCheckResult& result);

}  // namespace detllm::model_check
