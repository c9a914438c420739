// Small building blocks of conformance tests that compose their own executions (the Llama-8B
// GPU suite, tests/cuda/cuda_llama8b_conformance_test.cpp): the "each request alone" reference,
// and the harness's comparisons (first_mismatch, the V4 check compare_generation_scoring) as
// gtest assertions. Header-only; the harness itself is src/verify/conformance.h.
#pragma once

#include <gtest/gtest.h>

#include <string>
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

}  // namespace detllm::conformance::checks
