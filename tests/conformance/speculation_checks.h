// Speculative decoding as a variation (docs/speculative.md), shared by the conformance suite
// (conformance_suite.h: every model and backend) and its negative control
// (negative_control_test.cpp): a workload of repetitive prompts — so that the n-gram drafter
// proposes, and its drafts are both accepted and rejected — run without speculation and with
// n-gram drafts of K = 1, 3 and 8, also chunked (a window verified over several steps) and in a
// pool small enough to preempt (drafts dropped, committed tokens recomputed), and on a prefix
// cache warmed by a speculative run (only committed tokens' KV is published); then with the
// draft-model drafter — the target as its own drafter (greedy drafts: every greedy request's
// accepted, the seeded ones' mostly rejected), whole, chunked and preempting, and a synthetic
// model of another seed with the same vocabulary — and with the adaptive draft length and
// off-switch (draft_policy.h) on both drafters. Every deterministic request's tokens,
// logprobs, top logprobs and fp32 logits must be the same bits. With graphs on, verify steps
// must have run as padded decode steps (windows as decode rows) and, where the backend has
// graphs, replayed from them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "determinism/modes.h"
#include "model/llama_model.h"
#include "model/step_padding.h"
#include "model/synthetic.h"
#include "verify/conformance.h"

namespace detllm::conformance {

// n requests: a random pattern of 2…6 tokens repeated up to ~40 tokens, then 0…3 random
// tokens; greedy or seeded sampling (some with top-k / top-p), top logprobs 0…3, some with two
// samples, one with prompt logprobs, one with penalties; max_tokens 8…24.
inline std::vector<engine::Request> repetitive_workload(uint64_t seed, int32_t vocab_size,
                                                        int32_t n) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<engine::Request> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) {
    engine::Request& r = out[i];
    std::vector<int32_t> pattern(static_cast<size_t>(uniform(2, 6)));
    for (int32_t& t : pattern) t = static_cast<int32_t>(uniform(0, vocab_size - 1));
    const int64_t len = uniform(12, 40);
    while (static_cast<int64_t>(r.prompt.size()) < len) {
      r.prompt.push_back(pattern[r.prompt.size() % pattern.size()]);
    }
    for (int64_t k = uniform(0, 3); k > 0; --k) {
      r.prompt.push_back(static_cast<int32_t>(uniform(0, vocab_size - 1)));
    }
    r.max_tokens = static_cast<int32_t>(uniform(8, 24));
    r.sampling.n_logprobs = static_cast<int32_t>(uniform(0, 3));
    if (i % 2 == 0) {
      r.sampling.temperature = 0.0f;
    } else {
      r.sampling.temperature = i % 3 == 0 ? 0.7f : 0.4f;
      if (uniform(0, 2) == 0) r.sampling.top_k = static_cast<int32_t>(uniform(2, 20));
      if (uniform(0, 2) == 0) r.sampling.top_p = 0.9f;
      r.sampling.seed = rng();
    }
    if (i % 4 == 1) r.n = 2;
    if (i == 2) r.prompt_logprobs = 1;
    if (i == 3) {
      r.sampling.repetition_penalty = 1.1f;
      r.sampling.frequency_penalty = 0.2f;
    }
  }
  return out;
}

struct SpeculationVerdict {
  std::optional<Mismatch> mismatch;  // the first difference from the run without speculation
  // A run accepted no draft or (where asked) preempted nothing, or no run rejected a draft.
  std::optional<std::string> not_exercised;
  int64_t n_draft_tokens = 0;
  int64_t n_accepted_draft_tokens = 0;
  int64_t n_decode_row_windows = 0;  // windows verified as decode rows (the padded mode)
  // Steps that computed windows as decode rows, and of them those padded to a row bucket and
  // those replayed from a graph (EngineStats::n_window_row_steps*), over every execution.
  int64_t n_window_row_steps = 0;
  int64_t n_window_row_steps_padded = 0;
  int64_t n_window_row_steps_replayed = 0;
};

// Runs `reqs` without speculation, then with drafts in several executions; the first
// mismatch, or why the drafts did not do what the check needs (proposed, accepted, rejected).
// Which cases run: the n-gram ones, all, or the draft-model and adaptive ones alone (a
// negative control that must see those cases fail on their own). A suite that runs several
// workloads runs the draft-model cases (as costly again as the n-gram ones) on one.
enum class SpeculationCases { kNgram, kAll, kDrafters };
// with_preemption = false leaves out the cases whose pool preempts (a backend whose prefill
// rows differ from decode rows — the padded mode's guarantee, not V6 — recomputes other KV).
// Every execution runs under the target's mode's execution constraints (apply_mode: the padded
// mode's fixed decode shape). graphs: every execution's EngineConfig::cuda_graphs (after
// apply_mode), the mode's own when none; kOn also asks that verify steps were padded — and,
// on a backend with graphs, replayed — as decode steps (windows as decode rows).
inline SpeculationVerdict check_speculation(const Target& target,
                                            const std::vector<engine::Request>& reqs,
                                            SpeculationCases which = SpeculationCases::kAll,
                                            bool with_preemption = true,
                                            std::optional<GraphMode> graphs = std::nullopt) {
  const bool with_drafters = which != SpeculationCases::kNgram;
  SpeculationVerdict v;
  Execution plain = base_execution("no speculation");
  apply_mode(target.policy.mode, plain.engine);
  if (graphs) plain.engine.cuda_graphs = *graphs;
  const RunResult ref = run(target, plain, reqs);
  // A draft model of another seed, where the target's weights are synthetic and its ops can
  // be made (not for a shared model).
  std::unique_ptr<kernels::Ops> other_ops;
  std::optional<ModelWeights> other_weights;
  std::unique_ptr<LlamaModel> other_draft;
  if (with_drafters && target.make_ops && !target.shared_model &&
      (target.recipe || target.weights)) {
    other_ops = target.make_ops(2);
    other_weights.emplace(make_synthetic_weights(*target.config, 0x5eedd5af7));
    other_draft = std::make_unique<LlamaModel>(*target.config, *other_weights, *other_ops);
  }
  enum class Drafter { kNgram, kSelf, kOther };
  struct Case {
    std::string label;
    int32_t k;
    int32_t chunk;
    int32_t n_blocks;
    bool warm = false;  // the same workload ran first, speculative: its published blocks reused
    Drafter drafter = Drafter::kNgram;
    bool adaptive = false;
  };
  std::vector<Case> cases;
  if (which != SpeculationCases::kDrafters) {
    cases = {{"K=1", 1, 0, 0},
             {"K=3", 3, 0, 0},
             {"K=8", 8, 0, 0},
             {"K=5, chunks of 3", 5, 3, 0},
             {"K=4, a pool that preempts", 4, 0, 24},
             {"K=3, prefix cache warmed by a speculative run", 3, 0, 0, true}};
  }
  if (with_drafters) {
    cases.push_back({"draft model = target, K=3", 3, 0, 0, false, Drafter::kSelf});
    cases.push_back({"draft model = target, K=5, chunks of 3", 5, 3, 0, false, Drafter::kSelf});
    cases.push_back(
        {"draft model = target, K=4, a pool that preempts", 4, 0, 24, false, Drafter::kSelf});
    cases.push_back({"draft model = target, K=4, adaptive", 4, 0, 0, false, Drafter::kSelf, true});
    cases.push_back({"K=4, adaptive", 4, 0, 0, false, Drafter::kNgram, true});
  }
  if (other_draft) {
    cases.push_back({"draft model of another seed, K=3", 3, 0, 0, false, Drafter::kOther});
    cases.push_back(
        {"draft model of another seed, K=5, adaptive", 5, 0, 0, false, Drafter::kOther, true});
  }
  if (!with_preemption) std::erase_if(cases, [](const Case& c) { return c.n_blocks > 0; });
  bool backend_graphs = false;
  for (const Case& c : cases) {
    Execution e = base_execution("speculative " + c.label);
    apply_mode(target.policy.mode, e.engine);
    if (graphs) e.engine.cuda_graphs = *graphs;
    e.engine.speculative.method = c.drafter == Drafter::kNgram
                                      ? engine::SpeculativeMethod::kNgram
                                      : engine::SpeculativeMethod::kDraftModel;
    e.draft_is_target = c.drafter == Drafter::kSelf;
    if (c.drafter == Drafter::kOther) e.draft_model = other_draft.get();
    e.engine.speculative.adaptive = c.adaptive;
    e.engine.speculative.num_speculative_tokens = c.k;
    e.engine.speculative.prompt_lookup_min = 1;
    e.engine.speculative.prompt_lookup_max = 3;
    e.engine.scheduler.chunk_size = c.chunk;
    if (c.chunk > 0) e.engine.scheduler.max_tokens_per_step = 16;
    if (c.n_blocks > 0) {
      e.engine.kv_cache_tokens = 0;
      e.engine.scheduler.kv.n_blocks = c.n_blocks;
    }
    if (c.warm) e.warmup = reqs;
    const RunResult got = run(target, e, reqs);
    if (auto m = first_mismatch(reqs, ref.traces, got.traces)) {
      v.mismatch = Mismatch{"speculative " + c.label + ": " + m->what};
      return v;
    }
    const engine::EngineStats& s = got.engine_stats;
    v.n_draft_tokens += s.n_draft_tokens;
    v.n_accepted_draft_tokens += s.n_accepted_draft_tokens;
    v.n_decode_row_windows += got.n_decode_row_windows;
    v.n_window_row_steps += s.n_window_row_steps;
    v.n_window_row_steps_padded += s.n_window_row_steps_padded;
    v.n_window_row_steps_replayed += s.n_window_row_steps_replayed;
    backend_graphs = backend_graphs || got.graphs_available;
    // padded: a window that only ever got one row a step would be plain decoding; the check
    // must see windows of several decode rows in every execution.
    const bool padded = target.policy.mode == DeterminismMode::kPadded;
    // A draft model of other weights may guess nothing right: it must only change no bit.
    if (!v.not_exercised && s.n_accepted_draft_tokens == 0 && c.drafter != Drafter::kOther) {
      v.not_exercised = c.label + ": no draft was accepted";
    } else if (!v.not_exercised && c.n_blocks > 0 && got.n_preemptions == 0) {
      v.not_exercised = c.label + ": nothing was preempted";
    } else if (!v.not_exercised && padded && got.n_decode_row_windows == 0) {
      v.not_exercised = c.label + ": no window was verified as decode rows";
    }
  }
  if (!v.not_exercised && v.n_accepted_draft_tokens == v.n_draft_tokens) {
    v.not_exercised = "no run rejected a draft";
  }
  // Graphs on: verify steps must have run as padded decode steps, replayed where the backend
  // has graphs (a check that only saw eager windows would say nothing about replays).
  if (!v.not_exercised && graphs == GraphMode::kOn) {
    if (v.n_window_row_steps_padded == 0) {
      v.not_exercised = "graphs on: no verify step was padded as a decode step";
    } else if (backend_graphs && v.n_window_row_steps_replayed == 0) {
      v.not_exercised = "graphs on: no verify step was replayed from a graph";
    }
  }
  return v;
}

}  // namespace detllm::conformance
