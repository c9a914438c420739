// The tensor-parallel degree as a variation of the conformance subset issue 17 names (V1, V3,
// V4, V5, V7), through the engine: a model's requests run at TP d (a TpGroup of d ranks as
// threads, model/tp_group.h) give every bit of each request run alone at TP 1 — together and
// in reversed add order (V1), in chunks of 7 and 64 (V3), with the prefix cache off, warm and
// partly warm (V5), on shuffled fragmented pages (V7) — and generation at one degree equals
// re-scoring at the other, both ways (V4: the RL case, rollouts at TP d scored at TP 1).
// Shared by tests/conformance/tp_degree_test.cpp (CPU ranks, tiny models) and
// tests/cuda/cuda_tp_llama8b_conformance_test.cpp (CUDA ranks on one GPU, the 8B layer shapes).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "conformance/conformance_checks.h"
#include "model/tp_group.h"
#include "verify/conformance.h"

namespace detllm::conformance {

class TpDegreeChecks {
 public:
  using MakeOps = std::function<std::unique_ptr<kernels::Ops>()>;
  // The groups are made on first use and kept: `weights` must outlive this object.
  TpDegreeChecks(const ModelConfig& config, const ModelWeights& weights, MakeOps make_ops,
                 std::string name)
      : config_(config),
        weights_(weights),
        make_ops_(std::move(make_ops)),
        name_(std::move(name)) {}

  // Every check at every degree of `degrees` (each > 1) against TP 1; gtest failures name the
  // check and the degree.
  void expect_every_degree_reproduces_tp1(const std::vector<int32_t>& degrees) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto reqs = workload(91);
    const std::vector<RequestTrace> ref = checks::run_alone(target(1), exec("alone, TP 1"), reqs);
    const auto gen_reqs = workload(92, /*scoring_share=*/0);
    const RunResult gen1 = run(target(1), exec("V4 generate, TP 1"), gen_reqs);
    Execution score = exec("V4 score, chunk 64");
    score.engine.scheduler.chunk_size = 64;
    score.engine.scheduler.max_tokens_per_step = 160;
    for (int32_t d : degrees) {
      const Target t = target(d);
      const std::string at = ", TP " + std::to_string(d);
      ASSERT_TRUE(checks::same_traces(reqs, ref, run(t, exec("V1 together" + at), reqs)))
          << "V1" << at;
      Execution reversed = exec("V1 reversed" + at);
      reversed.add_order.resize(reqs.size());
      for (size_t i = 0; i < reqs.size(); ++i)
        reversed.add_order[i] = static_cast<int32_t>(reqs.size() - 1 - i);
      ASSERT_TRUE(checks::same_traces(reqs, ref, run(t, reversed, reqs))) << reversed.label;
      for (const auto& [chunk, budget] : {std::pair{7, 20}, std::pair{64, 100}}) {
        Execution e = exec("V3 chunk " + std::to_string(chunk) + at);
        e.engine.scheduler.chunk_size = chunk;
        e.engine.scheduler.max_tokens_per_step = budget;
        ASSERT_TRUE(checks::same_traces(reqs, ref, run(t, e, reqs))) << e.label;
      }
      size_t n = 0;
      ASSERT_TRUE(checks::generation_equals_scoring(
          gen_reqs, gen1, run(t, score, scoring_requests(gen_reqs, gen1)), &n))
          << "V4: generated at TP 1, scored" << at;
      EXPECT_GE(n, 16u);
      const RunResult gen_d = run(t, exec("V4 generate" + at), gen_reqs);
      ASSERT_TRUE(checks::generation_equals_scoring(
          gen_reqs, gen_d, run(target(1), score, scoring_requests(gen_reqs, gen_d))))
          << "V4: generated" << at << ", scored at TP 1";
      Execution cold = exec("V5 cache off" + at);
      cold.engine.scheduler.kv.enable_prefix_cache = false;
      ASSERT_TRUE(checks::same_traces(reqs, ref, run(t, cold, reqs))) << cold.label;
      Execution warm = exec("V5 warm" + at);
      warm.warmup = reqs;
      const RunResult w = run(t, warm, reqs);
      ASSERT_TRUE(checks::same_traces(reqs, ref, w)) << warm.label;
      EXPECT_GT(w.n_cached_tokens, 0) << warm.label << ": no prefix-cache hit";
      Execution partial = exec("V5 partial" + at);
      partial.warmup = partial_prefix_warmup(reqs);
      const RunResult p = run(t, partial, reqs);
      ASSERT_TRUE(checks::same_traces(reqs, ref, p)) << partial.label;
      EXPECT_GT(p.n_cached_tokens, 0) << partial.label << ": no prefix-cache hit";
      Execution shuffled = exec("V7 shuffled, fragmented" + at);
      shuffled.engine.scheduler.kv.shuffle_blocks = true;
      shuffled.engine.scheduler.kv.shuffle_seed = 6;
      shuffled.warmup = workload(93);
      ASSERT_TRUE(checks::same_traces(reqs, ref, run(t, shuffled, reqs))) << shuffled.label;
      std::printf("[tp-degree] %s, TP %d: V1, V3, V4, V5, V7 equal TP 1 (%.1f s so far)\n",
                  name_.c_str(), d,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }

 private:
  TpGroup& group(int32_t degree) {
    auto it = groups_.find(degree);
    if (it == groups_.end())
      it = groups_.emplace(degree, std::make_unique<TpGroup>(config_, weights_, degree, make_ops_))
               .first;
    return *it->second;
  }
  Target target(int32_t degree) {
    Target t;
    t.name = name_ + ", TP " + std::to_string(degree);
    t.config = &config_;
    t.shared_model = [this, degree]() -> LlamaModel& { return group(degree).leader(); };
    return t;
  }
  static Execution exec(std::string label) { return checks::large_model_exec(std::move(label)); }
  std::vector<engine::Request> workload(uint64_t seed, double scoring_share = 0.25) const {
    return checks::large_model_workload(seed, config_.vocab_size, scoring_share);
  }

  const ModelConfig& config_;
  const ModelWeights& weights_;
  MakeOps make_ops_;
  std::string name_;
  std::map<int32_t, std::unique_ptr<TpGroup>> groups_;
};

}  // namespace detllm::conformance
