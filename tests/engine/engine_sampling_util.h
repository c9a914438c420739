// Test helper shared by tests/engine/engine_sampling_test.cpp (CPU) and
// tests/cuda/cuda_engine_sampling_test.cpp (GPU): a mixed workload (greedy and seeded sampling,
// top-k/top-p/min-p, n > 1, top logprobs, prompt logprobs, stop ids, scoring-only, staggered
// arrivals so prefill chunks and decode rows share steps), a runner that records everything a
// client sees, and a bitwise comparison — to show that sampling on the backend
// (EngineConfig::host_sampling = false) gives what host logits + host sampling give.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/engine.h"
#include "model/llama_model.h"

namespace detllm::engine::testing {

// Everything one request delivered through its callbacks.
struct Observed {
  std::vector<std::vector<int32_t>> tokens;                 // (n) generated tokens
  std::vector<std::vector<float>> logprobs;                 // (n)
  std::vector<std::vector<std::vector<TokenLogprob>>> top;  // (n) per token
  std::vector<std::vector<int32_t>> positions;              // (n) per token
  std::vector<FinishReason> finish;                         // (n)
  std::vector<PromptLogprob> prompt_logprobs;
  std::map<std::pair<int32_t, int32_t>, std::vector<float>> logits;  // (sample, pos) → (vocab)
};

struct Outcome {
  std::vector<Observed> requests;
  EngineStats stats;
  int64_t model_rows_downloaded = 0;  // LlamaModel::StepStats, this run only
  int64_t n_graph_replays = 0;
  int64_t n_padded_steps = 0;
};

// The workload: request i is added before step arrival[i].
struct Workload {
  std::vector<Request> requests;
  std::vector<int32_t> arrival;
};

inline std::vector<int32_t> test_prompt(int32_t n, int32_t salt, int32_t vocab) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = (i * 37 + salt * 101 + 5) % vocab;
  return p;
}

// with_consumers: add requests that read logits on the host (prompt logprobs, captured logits).
inline Workload sampling_workload(int32_t vocab, bool with_consumers) {
  Workload w;
  auto add = [&](Request r, int32_t when) {
    w.requests.push_back(std::move(r));
    w.arrival.push_back(when);
  };
  Request r;
  r.prompt = test_prompt(9, 1, vocab);  // greedy with top logprobs
  r.max_tokens = 10;
  r.sampling.temperature = 0.0f;
  r.sampling.n_logprobs = 3;
  add(r, 0);
  r = {};
  r.prompt = test_prompt(14, 2, vocab);  // n = 3 from one row (the fork), top-k
  r.max_tokens = 9;
  r.n = 3;
  r.sampling.temperature = 0.8f;
  r.sampling.top_k = 20;
  r.sampling.seed = 11;
  r.sampling.n_logprobs = 2;
  add(r, 0);
  r = {};
  r.prompt = test_prompt(21, 3, vocab);  // top-p + min-p, arrives while others decode
  r.max_tokens = 12;
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 0.9f;
  r.sampling.min_p = 0.05f;
  r.sampling.seed = 12;
  r.sampling.n_logprobs = SamplingParams::kMaxLogprobs;
  add(r, 2);
  r = {};
  r.prompt = test_prompt(5, 4, vocab);  // hot, n = 2, stop ids (set by the caller)
  r.max_tokens = 16;
  r.n = 2;
  r.sampling.temperature = 1.3f;
  r.sampling.seed = 13;
  add(r, 3);
  r = {};
  r.prompt = test_prompt(1, 5, vocab);  // one-token prompt, low temperature
  r.max_tokens = 7;
  r.sampling.temperature = 0.3f;
  r.sampling.top_p = 0.5f;
  r.sampling.seed = 14;
  r.sampling.n_logprobs = 1;
  add(r, 5);
  if (with_consumers) {
    r = {};
    r.prompt = test_prompt(17, 6, vocab);  // prompt logprobs, then generation, n = 2
    r.max_tokens = 6;
    r.n = 2;
    r.prompt_logprobs = 2;
    r.sampling.temperature = 0.9f;
    r.sampling.seed = 15;
    r.sampling.n_logprobs = 1;
    add(r, 1);
    r = {};
    r.prompt = test_prompt(12, 7, vocab);  // scoring only
    r.max_tokens = 0;
    r.prompt_logprobs = 1;
    add(r, 2);
    r = {};
    r.prompt = test_prompt(8, 8, vocab);  // captured logits (what the conformance harness does)
    r.max_tokens = 5;
    r.capture_logits = true;
    r.sampling.temperature = 1.1f;
    r.sampling.top_k = 50;
    r.sampling.seed = 16;
    add(r, 4);
  }
  return w;
}

// Runs the workload to completion on a fresh engine over `model`.
inline Outcome run_workload(const LlamaModel& model, const EngineConfig& config,
                            const Workload& w) {
  Engine engine(model, config);
  const LlamaModel::StepStats before = model.step_stats();
  Outcome out;
  out.requests.resize(w.requests.size());
  size_t n_added = 0;
  for (int32_t step = 0; n_added < w.requests.size() || engine.has_work(); ++step) {
    if (step > 100000) throw Error("the workload did not finish");
    for (size_t i = 0; i < w.requests.size(); ++i) {
      if (w.arrival[i] != step) continue;
      const Request& r = w.requests[i];
      Observed& o = out.requests[i];
      const auto n = static_cast<size_t>(r.n);
      o.tokens.resize(n);
      o.logprobs.resize(n);
      o.top.resize(n);
      o.positions.resize(n);
      o.finish.assign(n, FinishReason::kNone);
      RequestCallbacks cb;
      cb.on_token = [&o](const TokenEvent& e) {
        const auto k = static_cast<size_t>(e.sample_index);
        o.tokens[k].push_back(e.token);
        o.logprobs[k].push_back(e.logprob);
        o.top[k].push_back(e.top_logprobs);
        o.positions[k].push_back(e.position);
      };
      cb.on_prompt_logprobs = [&o](std::span<const PromptLogprob> p) {
        o.prompt_logprobs.assign(p.begin(), p.end());
      };
      cb.on_logits = [&o](int32_t k, int32_t pos, std::span<const float> l) {
        o.logits[{k, pos}].assign(l.begin(), l.end());
      };
      cb.on_finish = [&o](int32_t k, FinishReason f, const Usage&) {
        o.finish[static_cast<size_t>(k)] = f;
      };
      engine.add_request(r, std::move(cb));
      ++n_added;
    }
    engine.step();
  }
  out.stats = engine.stats();
  const LlamaModel::StepStats& after = model.step_stats();
  out.model_rows_downloaded = after.n_logit_rows_downloaded - before.n_logit_rows_downloaded;
  out.n_graph_replays = after.n_graph_replays - before.n_graph_replays;
  out.n_padded_steps = after.n_padded_steps - before.n_padded_steps;
  return out;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline bool same_bits(const std::vector<TokenLogprob>& a, const std::vector<TokenLogprob>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].token != b[i].token || std::memcmp(&a[i].logprob, &b[i].logprob, 4) != 0) {
      return false;
    }
  }
  return true;
}

// The first thing a client would see differently, or "" when every bit is equal.
inline std::string first_difference(const Outcome& a, const Outcome& b) {
  if (a.requests.size() != b.requests.size()) return "request counts differ";
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const Observed& x = a.requests[i];
    const Observed& y = b.requests[i];
    if (x.tokens.size() != y.tokens.size()) return fmt::format("request {}: sample counts", i);
    for (size_t k = 0; k < x.tokens.size(); ++k) {
      const std::string at = fmt::format("request {} sample {}", i, k);
      if (x.tokens[k] != y.tokens[k]) return at + ": tokens differ";
      if (x.positions[k] != y.positions[k]) return at + ": positions differ";
      if (!same_bits(x.logprobs[k], y.logprobs[k])) return at + ": logprobs differ";
      for (size_t t = 0; t < x.top[k].size(); ++t) {
        if (!same_bits(x.top[k][t], y.top[k][t])) {
          return fmt::format("{}: top logprobs of token {} differ", at, t);
        }
      }
      if (x.finish[k] != y.finish[k]) return at + ": finish reasons differ";
    }
    if (x.prompt_logprobs.size() != y.prompt_logprobs.size()) {
      return fmt::format("request {}: prompt logprob counts differ", i);
    }
    for (size_t p = 0; p < x.prompt_logprobs.size(); ++p) {
      const PromptLogprob& u = x.prompt_logprobs[p];
      const PromptLogprob& v = y.prompt_logprobs[p];
      if (u.position != v.position || u.token != v.token ||
          std::memcmp(&u.logprob, &v.logprob, 4) != 0 ||
          !same_bits(u.top_logprobs, v.top_logprobs)) {
        return fmt::format("request {}: prompt logprob {} differs", i, p);
      }
    }
    if (x.logits.size() != y.logits.size()) {
      return fmt::format("request {}: captured logits at {} vs {} positions", i, x.logits.size(),
                         y.logits.size());
    }
    for (const auto& [key, l] : x.logits) {
      auto it = y.logits.find(key);
      if (it == y.logits.end() || !same_bits(l, it->second)) {
        return fmt::format("request {}: captured logits of sample {} position {} differ", i,
                           key.first, key.second);
      }
    }
  }
  return "";
}

inline int64_t count_finish(const Outcome& o, FinishReason reason) {
  int64_t n = 0;
  for (const Observed& r : o.requests)
    for (FinishReason f : r.finish) n += f == reason ? 1 : 0;
  return n;
}

// Stop ids for request 3 (two hot samples) taken from a run without them: the third token of
// sample 0 and the second of sample 1, so both samples stop early (kStop) at known places.
inline void set_stop_ids(Workload& w, const Outcome& probe) {
  const Observed& o = probe.requests.at(3);
  std::vector<int32_t> stops;
  if (o.tokens[0].size() > 2) stops.push_back(o.tokens[0][2]);
  if (o.tokens[1].size() > 1) stops.push_back(o.tokens[1][1]);
  w.requests[3].stop_token_ids = stops;
}

}  // namespace detllm::engine::testing
