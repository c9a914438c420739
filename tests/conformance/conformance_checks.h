// Small building blocks of conformance tests that compose their own executions (the Llama-8B
// GPU suite, tests/cuda/cuda_llama8b_conformance_test.cpp; the TP-degree checks,
// tp_degree_checks.h): the "each request alone" reference, the harness's comparisons
// (first_mismatch, the V4 check compare_generation_scoring) as gtest assertions, and the
// baseline execution and workload of the large-shape tests. Header-only; the harness itself is src/verify/conformance.h.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "verify/conformance.h"

namespace detllm::conformance::checks {

// Each request run alone, in a fresh engine under `e`: the reference every variation must
// reproduce.
inline std::vector<RequestTrace> run_alone(const Target& target, const Execution& e,
                                           const std::vector<engine::Request>& reqs) {
  std::vector<RequestTrace> out;
  for (const auto& r : reqs) out.push_back(run(target, e, {r}).traces.at(0));
  return out;
}

// Every deterministic request of `got` equals `ref` bit for bit (compare()).
inline ::testing::AssertionResult same_traces(const std::vector<engine::Request>& reqs,
                                              const std::vector<RequestTrace>& ref,
                                              const RunResult& got) {
  if (got.traces.size() != reqs.size() || ref.size() != reqs.size()) {
    return ::testing::AssertionFailure()
           << "trace counts differ: " << ref.size() << " vs " << got.traces.size() << " for "
           << reqs.size() << " requests";
  }
  if (const auto m = first_mismatch(reqs, ref, got.traces)) {
    return ::testing::AssertionFailure() << m->what;
  }
  return ::testing::AssertionSuccess();
}

// V4, step 2 as a gtest assertion: compare_generation_scoring (verify/conformance.h).
// `score` ran scoring_requests(reqs, gen). Counts the positions compared.
inline ::testing::AssertionResult generation_equals_scoring(
    const std::vector<engine::Request>& reqs, const RunResult& gen, const RunResult& score,
    size_t* n_compared = nullptr) {
  if (const auto m = compare_generation_scoring(reqs, gen, score, n_compared)) {
    return ::testing::AssertionFailure() << m->what;
  }
  return ::testing::AssertionSuccess();
}

// The baseline execution of the engine-level tests on large shapes (the Llama-8B suite, the
// TP-degree checks): blocks of 16, a 4096-token pool, whole prompts, no step limit that
// matters, up to 64 sequences.
inline Execution large_model_exec(std::string label) {
  Execution e;
  e.label = std::move(label);
  e.engine.scheduler.kv.block_size = 16;
  e.engine.kv_cache_tokens = 4096;
  e.engine.scheduler.max_tokens_per_step = 4096;
  e.engine.scheduler.max_seqs = 64;
  e.engine.scheduler.chunk_size = 0;
  return e;
}

// Their workload: four requests, prompts of 20–300 random ids below `vocab_size` (half share a
// prefix with another), greedy or seeded sampling, some with 2 samples; generating requests
// make 4–6 tokens, so that there are decode steps to pad and replay (V8).
inline std::vector<engine::Request> large_model_workload(uint64_t seed, int32_t vocab_size,
                                                         double scoring_share = 0.25) {
  WorkloadSpec s;
  s.n_requests = 4;
  s.vocab_size = vocab_size;
  s.min_prompt = 20;
  s.max_prompt = 300;
  s.max_new_tokens = 6;
  s.scoring_share = scoring_share;
  auto reqs = random_workload(seed, s);
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i].max_tokens > 0) reqs[i].max_tokens = 4 + static_cast<int32_t>(i % 3);
  return reqs;
}

}  // namespace detllm::conformance::checks
