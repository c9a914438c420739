// The determinism conformance harness (design.md V1–V11): runs a workload of requests through
// an Engine under one Execution (batching, arrival, chunking, cache, KV budget, page layout,
// threads…), records every output position's fp32 logits and every token, and compares two
// runs bit for bit. Parameterised by backend (an Ops factory) and determinism policy, so the
// CPU suite in tests/conformance and later the GPU backend and modes run the same checks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_config.h"
#include "engine/request.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/llama_weights.h"

namespace detllm {
class LlamaModel;
struct SyntheticWeights;
}  // namespace detllm

namespace detllm::conformance {

// What is under test: a model, a backend and a policy. The model comes from exactly one of
// `weights`, `recipe` and `shared_model`:
//   weights       host weights; every run makes its ops and a LlamaModel on them (uploaded on
//                 a device backend, used in place on the CPU);
//   recipe        a synthetic recipe (model/synthetic.h); every run makes its ops and generates
//                 the weights in their memory (LlamaModel's recipe constructor) — no host copy;
//   shared_model  a model made once, on ops of its own, and reused by every run (make_ops and
//                 Execution::n_threads are then unused). For models too large to remake per
//                 run (Llama-3.1-8B: 16 GB generated on the GPU, GEMM plans tuned per ops):
//                 each run still gets a fresh Engine, KV pool and prefix cache; the model's
//                 scratch, graphs and plans persist, which may change no bit (V8, Rule 1).
// config describes the model in every case (the workload needs its vocabulary).
struct Target {
  std::string name;
  const ModelConfig* config = nullptr;
  const ModelWeights* weights = nullptr;
  const SyntheticWeights* recipe = nullptr;
  std::function<LlamaModel&()> shared_model;
  std::function<std::unique_ptr<kernels::Ops>(int n_threads)> make_ops;
  DeterminismPolicy policy;
};

// One way of executing a workload. Everything here is an execution variation: for a
// deterministic request none of it may change a single bit.
struct Execution {
  std::string label;
  engine::EngineConfig engine;      // chunk size, budget, KV pool, prefix cache, block shuffling
  int n_threads = 2;                // V11
  std::vector<int32_t> arrival;     // per request: the step before which it is added (V2); {} = 0
  std::vector<size_t> add_order;    // order of add_request within a step (V2); {} = as given
  bool check_kv_every_step = true;  // KV accounting checked after every step
  // Run to completion in the same engine before the workload (untraced): a warm prefix cache
  // (V5) or a KV pool whose blocks have been used and released in some order (V7).
  std::vector<engine::Request> warmup;
  // Speculative method draft_model: the draft model (it must outlive the run), or, with
  // draft_is_target, the run's own model as its own drafter (every greedy draft accepted).
  const LlamaModel* draft_model = nullptr;
  bool draft_is_target = false;
};

// The engine every conformance check starts from and changes one thing of: blocks of 4, a
// 4096-token pool and step budget, 64 sequences, whole prompts (no chunk limit).
engine::EngineConfig base_engine_config();
// An Execution on base_engine_config() with this label and CPU thread count.
Execution base_execution(std::string label, int n_threads = 2);

// Everything observed of one request.
struct RequestTrace {
  std::vector<std::vector<int32_t>> tokens;  // (n samples) generated tokens
  std::vector<std::vector<float>> logprobs;  // (n samples) logprob of each generated token
  // (n samples, generated tokens) the top logprobs reported with each generated token.
  std::vector<std::vector<std::vector<TokenLogprob>>> top_logprobs;
  // (n samples, generated tokens) the routed experts reported with each generated token
  // (n_layers × k ids; empty vectors for a model without experts).
  std::vector<std::vector<std::vector<int32_t>>> routed_experts;
  // (sample, position) → the logits (vocab) that predicted that position's token.
  std::map<std::pair<int32_t, int32_t>, std::vector<float>> logits;
  std::vector<engine::PromptLogprob> prompt_logprobs;
  std::vector<engine::FinishReason> finish;  // (n samples)
  std::vector<engine::Usage> usage;          // (n samples) as reported by on_finish
  std::vector<int32_t> cached_tokens;        // (n samples) prefix-cache hits seen in usage
  // Execution facts (never compared: they are the variations). Physical KV blocks of sample 0
  // (its longest block table seen), and the prompt chunks it ran (lengths, in order).
  std::vector<int32_t> blocks;
  std::vector<int32_t> prompt_chunks;
};

struct RunResult {
  std::vector<RequestTrace> traces;  // (requests), in the workload's order
  int64_t n_steps = 0;
  int64_t n_preemptions = 0;
  int64_t n_cached_tokens = 0;
  // Of the traced steps (warm-up excluded): the most rows and the most distinct requests one
  // step held, and how many steps held rows of two requests or more (V1).
  int64_t max_tokens_in_step = 0;
  int32_t max_requests_in_step = 0;
  int64_t n_shared_steps = 0;
  // Length → number of chunks that computed prompt positions (V3; recompute included).
  std::map<int32_t, int64_t> prompt_chunks;
  int64_t n_padded_steps = 0;     // decode steps padded to a bucket (V8: EngineConfig::cuda_graphs)
  int64_t n_graph_replays = 0;    // of which replayed from a captured graph (CUDA)
  // Steps × sequences whose draft window ran as decode rows of their own (the padded mode's
  // speculation, ScheduledSeq::decode_rows): the evidence that its layout was exercised.
  int64_t n_decode_row_windows = 0;
  bool graphs_available = false;  // the backend has Ops::graph_capture()
  int32_t block_size = 0;         // the run's KV block size
  engine::EngineStats engine_stats;  // the engine's counters at the end (warm-up included)
};

// One scheduled sequence of a step, as a StepListener sees it.
struct StepSeqInfo {
  int32_t request = -1;  // index in the workload; -1 for a warm-up request
  int32_t first_pos = 0;
  int32_t n_tokens = 0;
  int32_t token_begin = 0;      // first row in the plan's per-token arrays
  int32_t n_prompt = 0;         // the sequence's prompt length
  int32_t n_seq_tokens = 0;     // its tokens so far (prompt + generated)
  int32_t n_cached_tokens = 0;  // prefix-cache hit at its last admission
  int32_t n_preemptions = 0;    // times it was preempted so far
};
struct StepInfo {
  const engine::StepPlan& plan;
  std::vector<StepSeqInfo> seqs;  // (plan seqs)
  int32_t block_size = 0;         // slot = block * block_size + offset
};
// A backend (the model's Ops) that also implements StepListener is told every step, warm-up
// included, before the step's forward: the fault-injecting backends of the
// negative controls (tests/conformance/fault_ops.h) learn from it which rows reuse cached KV
// or recompute after a preemption.
class StepListener {
 public:
  virtual ~StepListener() = default;
  virtual void on_step(const StepInfo& step) = 0;
};

// Runs `requests` (capture_logits is forced on, and return_routed_experts on a model with
// experts) to completion under `exec`. Throws
// detllm::Error on KV accounting breaches or leaks (every block must be free or cached-idle
// at the end).
RunResult run(const Target& target, const Execution& exec,
              const std::vector<engine::Request>& requests);

struct Mismatch {
  std::string what;  // human-readable: request, sample, position, first differing index, values
};

// First difference between two traces of the same request: sample counts, token ids, logprobs
// and top logprobs (bits), finish reasons and usage (prompt and completion tokens; cached tokens
// and preemptions are execution facts), routed experts, logits bit for bit at every position
// both saw (and the set of positions), then prompt logprobs, their top logprobs (bits) and
// routed experts.
std::optional<Mismatch> compare(const RequestTrace& a, const RequestTrace& b);

// The first deterministic request (reqs[i].deterministic unset or true) whose traces differ,
// as "request i: <compare()'s what>"; nothing when every one is equal bit for bit.
std::optional<Mismatch> first_mismatch(const std::vector<engine::Request>& reqs,
                                       const std::vector<RequestTrace>& a,
                                       const std::vector<RequestTrace>& b);

// V4, step 1: one scoring request (max_tokens 0, every prompt logprob) per sample of `gen`:
// the request's prompt followed by that sample's generated tokens, in the order (request,
// sample).
std::vector<engine::Request> scoring_requests(const std::vector<engine::Request>& reqs,
                                              const RunResult& gen);
// V4, step 2: for every token of a deterministic request, its generation logits == the scoring
// run's logits at that position, and its logprob == the scoring prompt logprob. `score` ran
// scoring_requests(reqs, gen). The first difference, or nothing; counts the positions compared.
std::optional<Mismatch> compare_generation_scoring(const std::vector<engine::Request>& reqs,
                                                   const RunResult& gen, const RunResult& score,
                                                   size_t* n_compared = nullptr);

// What a run must show, from its own statistics, for an equal comparison to prove that its
// variation happened (a comparison of two runs that did the same thing proves nothing).
// Unset fields ask for nothing.
struct Expect {
  int32_t requests_in_step = 0;  // V1: some step held rows of at least this many requests
  // V3: > 0: every prompt chunk is at most this long and some chunk is exactly this long;
  // 0: every request's prompt (after its cache hit) ran in one chunk.
  std::optional<int32_t> chunk_size;
  bool no_hit = false;         // V5 reference: no prompt token came from the prefix cache
  bool full_hit = false;       // V5: a request reused every cacheable block of its prompt
  bool partial_hit = false;    // V5: a request reused some of its cacheable blocks, not all
  bool preemption = false;     // V6: a sequence was preempted (its KV freed, recomputed)
  bool other_layout = false;   // V7: a request's physical KV blocks differ from the reference's
  bool padded = false;         // V8: a decode step ran padded to a bucket
  bool graph_replays = false;  // V8: a step replayed a captured graph (if the backend has them)
};

// Why `got` (which ran `reqs`) does not show `want`; nothing when it does. `ref` is the
// reference's traces, needed by other_layout. Cacheable blocks of a prompt of L tokens: the
// full blocks before its last token ((L - 1) / block_size), as the prefix cache reuses them.
std::optional<std::string> not_exercised(const Expect& want,
                                         const std::vector<engine::Request>& reqs,
                                         const RunResult& got,
                                         const std::vector<RequestTrace>* ref = nullptr);

// Workload generation for property-based runs: `n` requests with prompts of random lengths
// (some sharing prefixes, to exercise the prefix cache), greedy or seeded sampling, 1–2
// samples, some scoring requests. All marked deterministic unless `nondet_share` > 0.
struct WorkloadSpec {
  int32_t n_requests = 6;
  int32_t vocab_size = 0;
  int32_t min_prompt = 1;
  int32_t max_prompt = 40;
  int32_t max_new_tokens = 12;
  double nondet_share = 0.0;
  double scoring_share = 0.15;
  bool allow_n_samples = true;
};
std::vector<engine::Request> random_workload(uint64_t seed, const WorkloadSpec& spec);

// The warm-up that makes `reqs` hit the prefix cache partially (V5): each prompt cut in the
// middle of a block ((n + 1) / 2 tokens) and continued by token 1, one new token, no prompt
// logprobs, one sample.
std::vector<engine::Request> partial_prefix_warmup(const std::vector<engine::Request>& reqs);

}  // namespace detllm::conformance
