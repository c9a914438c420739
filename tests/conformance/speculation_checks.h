// Speculative decoding as a variation (docs/speculative.md), shared by the conformance suite
// (conformance_suite.h: every model and backend) and its negative control
// (negative_control_test.cpp): a workload of repetitive prompts — so that the n-gram drafter
// proposes, and its drafts are both accepted and rejected — run without speculation and with
// n-gram drafts of K = 1, 3 and 8, also chunked (a window verified over several steps) and in a
// pool small enough to preempt (drafts dropped, committed tokens recomputed), and on a prefix
// cache warmed by a speculative run (only committed tokens' KV is published). Every
// deterministic request's tokens, logprobs, top logprobs and fp32 logits must be the same bits.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

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
};

// Runs `reqs` without speculation, then with n-gram drafts in several executions; the first
// mismatch, or why the drafts did not do what the check needs (proposed, accepted, rejected).
inline SpeculationVerdict check_speculation(const Target& target,
                                            const std::vector<engine::Request>& reqs) {
  SpeculationVerdict v;
  const RunResult ref = run(target, base_execution("no speculation"), reqs);
  struct Case {
    std::string label;
    int32_t k;
    int32_t chunk;
    int32_t n_blocks;
    bool warm = false;  // the same workload ran first, speculative: its published blocks reused
  };
  const Case cases[] = {{"K=1", 1, 0, 0},
                        {"K=3", 3, 0, 0},
                        {"K=8", 8, 0, 0},
                        {"K=5, chunks of 3", 5, 3, 0},
                        {"K=4, a pool that preempts", 4, 0, 24},
                        {"K=3, prefix cache warmed by a speculative run", 3, 0, 0, true}};
  for (const Case& c : cases) {
    Execution e = base_execution("speculative " + c.label);
    e.engine.speculative.method = engine::SpeculativeMethod::kNgram;
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
    if (!v.not_exercised && s.n_accepted_draft_tokens == 0) {
      v.not_exercised = c.label + ": no draft was accepted";
    } else if (!v.not_exercised && c.n_blocks > 0 && got.n_preemptions == 0) {
      v.not_exercised = c.label + ": nothing was preempted";
    }
  }
  if (!v.not_exercised && v.n_accepted_draft_tokens == v.n_draft_tokens) {
    v.not_exercised = "no run rejected a draft";
  }
  return v;
}

}  // namespace detllm::conformance
