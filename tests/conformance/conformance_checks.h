// Small building blocks of conformance tests that compose their own executions (the Llama-8B
// GPU suite, tests/cuda/cuda_llama8b_conformance_test.cpp): the "each request alone" reference,
// a bit-for-bit comparison of runs as a gtest assertion, and the V4 check (the logits a token
// was generated with == the logits of re-scoring the finished sequence). Header-only; the
// harness itself is src/determinism/conformance.h.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "determinism/conformance.h"

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
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!reqs[i].deterministic.value_or(true)) continue;
    if (const auto m = compare(ref[i], got.traces[i])) {
      return ::testing::AssertionFailure() << "request " << i << ": " << m->what;
    }
  }
  return ::testing::AssertionSuccess();
}

// V4, step 1: one scoring request (max_tokens 0, every prompt logprob) per sample of `gen`:
// the request's prompt followed by that sample's generated tokens. In the order
// (request, sample).
inline std::vector<engine::Request> scoring_requests(const std::vector<engine::Request>& reqs,
                                                     const RunResult& gen) {
  std::vector<engine::Request> out;
  for (size_t i = 0; i < reqs.size(); ++i) {
    for (const auto& toks : gen.traces.at(i).tokens) {
      engine::Request r;
      r.prompt = reqs[i].prompt;
      r.prompt.insert(r.prompt.end(), toks.begin(), toks.end());
      r.max_tokens = 0;
      r.prompt_logprobs = 0;
      out.push_back(std::move(r));
    }
  }
  return out;
}

// V4, step 2: for every generated token, its generation logits == the scoring run's logits at
// that position, and its logprob == the scoring prompt logprob. `score` ran
// scoring_requests(reqs, gen). Counts the positions compared.
inline ::testing::AssertionResult generation_equals_scoring(
    const std::vector<engine::Request>& reqs, const RunResult& gen, const RunResult& score,
    size_t* n_compared = nullptr) {
  size_t j = 0, n = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const int32_t n_prompt = static_cast<int32_t>(reqs[i].prompt.size());
    const RequestTrace& g = gen.traces.at(i);
    for (size_t k = 0; k < g.tokens.size(); ++k, ++j) {
      const auto& toks = g.tokens[k];
      const RequestTrace& s = score.traces.at(j);
      if (s.prompt_logprobs.size() != reqs[i].prompt.size() + toks.size() - 1) {
        return ::testing::AssertionFailure()
               << "request " << i << " sample " << k << ": " << s.prompt_logprobs.size()
               << " prompt logprobs from scoring";
      }
      for (size_t t = 0; t < toks.size(); ++t) {
        const int32_t pos = n_prompt + static_cast<int32_t>(t);
        const auto lg = g.logits.find({static_cast<int32_t>(k), pos});
        const auto ls = s.logits.find({0, pos});
        if (lg == g.logits.end() || ls == s.logits.end()) {
          return ::testing::AssertionFailure()
                 << "request " << i << " sample " << k << " position " << pos
                 << ": logits missing from " << (lg == g.logits.end() ? "generation" : "scoring");
        }
        if (lg->second.size() != ls->second.size() ||
            std::memcmp(lg->second.data(), ls->second.data(), lg->second.size() * 4) != 0) {
          return ::testing::AssertionFailure() << "request " << i << " sample " << k << " position "
                                               << pos << ": generation logits != scoring logits";
        }
        const float lp_gen = g.logprobs[k][t];
        const float lp_score = s.prompt_logprobs[pos - 1].logprob;
        if (std::memcmp(&lp_gen, &lp_score, 4) != 0) {
          return ::testing::AssertionFailure()
                 << "request " << i << " sample " << k << " position " << pos << ": logprob "
                 << lp_gen << " (generation) vs " << lp_score << " (scoring)";
        }
        ++n;
      }
    }
  }
  if (n_compared) *n_compared = n;
  return ::testing::AssertionSuccess();
}

}  // namespace detllm::conformance::checks
