// detllm bench runs (src/bench/driver.h) end to end on synthetic tiny-llama on the CPU: the
// token counts add up, the deterministic share is honoured, timelines are ordered; percentiles
// follow numpy; the default KV pool size.
#include <gtest/gtest.h>

#include <memory>

#include "bench/driver.h"
#include "bench/mode_runs.h"
#include "determinism/modes.h"
#include "kernels/ops.h"
#include "model/llama_model.h"
#include "model/synthetic.h"

namespace detllm::bench {
namespace {

class BenchDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = synthetic_config("tiny-llama");
    ops_ = kernels::make_cpu_ops(2);
    model_ = std::make_unique<LlamaModel>(config_, synthetic_recipe(config_, 1), *ops_);
    // Six requests of different lengths (two share a 32-token prefix: two full blocks).
    workload_ = random_token_workload(WorkloadKind::kFixed,
                                      {{5, 3}, {40, 7}, {1, 1}, {33, 12}, {17, 2}, {64, 5}},
                                      config_.vocab_size, config_.max_position, 4);
    workload_.requests[3].prompt.assign(workload_.requests[1].prompt.begin(),
                                        workload_.requests[1].prompt.begin() + 32);
    workload_.requests[3].prompt.push_back(7);
    engine_.kv_cache_tokens =
        default_kv_cache_tokens(workload_, config_, engine_.scheduler.kv.block_size, 1 << 20);
  }

  ModelConfig config_;
  std::unique_ptr<kernels::Ops> ops_;
  std::unique_ptr<LlamaModel> model_;
  Workload workload_;
  engine::EngineConfig engine_;
};

TEST_F(BenchDriver, OfflineTokenCountsAddUp) {
  int n_progress = 0;
  bool saw_finished = false;
  const RunResult r =
      run_offline(*model_, engine_, workload_, 50, 9, {}, [&](const RunProgress& p) {
        ++n_progress;
        saw_finished = p.finished;
        EXPECT_LE(p.n_done, p.n_total);
      });
  EXPECT_TRUE(saw_finished);
  EXPECT_GE(n_progress, 1);
  EXPECT_FALSE(r.online());
  EXPECT_EQ(r.n_requests, 6);
  EXPECT_EQ(r.n_deterministic, 3);
  EXPECT_EQ(r.prompt_tokens, workload_.n_prompt_tokens());
  EXPECT_EQ(r.output_tokens, workload_.n_output_tokens());
  EXPECT_EQ(r.output_tokens, 3 + 7 + 1 + 12 + 2 + 5);
  // Every prompt token and every output token but each request's last is computed once, or
  // skipped through the prefix cache (no preemptions: the pool holds every request).
  EXPECT_EQ(r.n_preemptions, 0);
  EXPECT_EQ(r.n_computed_tokens + r.n_cached_tokens,
            r.prompt_tokens + r.output_tokens - r.n_requests);
  EXPECT_GE(r.n_steps, 12);  // the longest request needs 12 sampled steps
  EXPECT_GT(r.output_tokens_per_s, 0.0);
  EXPECT_NEAR(r.total_tokens_per_s,
              static_cast<double>(r.prompt_tokens + r.output_tokens) / r.duration_s, 1e-6);
  EXPECT_EQ(r.det.e2e_ms.n, 3);
  EXPECT_EQ(r.other.e2e_ms.n, 3);
  EXPECT_EQ(r.all.e2e_ms.n, 6);
  EXPECT_EQ(r.all.tpot_ms.n, 5);  // the 1-token request has no TPOT
  EXPECT_EQ(r.step_ms.n, r.n_steps);
  for (const RequestTiming& t : r.requests) {
    EXPECT_EQ(t.arrival_s, 0.0);
    EXPECT_LE(t.arrival_s, t.first_token_s);
    EXPECT_LE(t.first_token_s, t.last_token_s);
    EXPECT_LE(t.last_token_s, t.finish_s);
    EXPECT_LE(t.finish_s, r.duration_s);
  }
}

// The run's steps by kind: under kAuto the CPU pads nothing (no graphs), under kOn its decode
// steps run padded to a bucket (eagerly: no graph replays, no captures); padded and unpadded
// steps add up to every step.
TEST_F(BenchDriver, StepsByKindAddUp) {
  const RunResult plain = run_offline(*model_, engine_, workload_, 100, 9, {}, {});
  EXPECT_EQ(plain.n_padded_steps, 0);
  EXPECT_EQ(plain.padded_step_ms.n, 0);
  EXPECT_EQ(plain.unpadded_step_ms.n, plain.n_steps);
  engine::EngineConfig on = engine_;
  on.cuda_graphs = GraphMode::kOn;
  const RunResult padded = run_offline(*model_, on, workload_, 100, 9, {}, {});
  EXPECT_GT(padded.n_padded_steps, 0);
  EXPECT_EQ(padded.padded_step_ms.n, padded.n_padded_steps);
  EXPECT_EQ(padded.padded_step_ms.n + padded.unpadded_step_ms.n, padded.n_steps);
  EXPECT_GT(padded.unpadded_step_ms.n, 0);  // the prompt steps
  EXPECT_EQ(padded.n_graph_replays, 0);
  EXPECT_EQ(padded.n_graph_captures, 0);
  EXPECT_EQ(padded.n_warmup_graph_captures, 0);  // the graph warm-up has nothing to capture here
  // The step trace (--step-trace) lists every step, and its flags and tokens add up.
  ASSERT_EQ(static_cast<int64_t>(padded.steps.size()), padded.n_steps);
  int64_t n_padded = 0, computed = 0, generated = 0;
  for (const RunResult::StepTrace& s : padded.steps) {
    n_padded += s.padded;
    computed += s.computed_tokens;
    generated += s.generated_tokens;
    EXPECT_GT(s.ms, 0.0);
    EXPECT_FALSE(s.replayed || s.captured);  // no graphs on the CPU
  }
  EXPECT_EQ(n_padded, padded.n_padded_steps);
  EXPECT_EQ(computed, padded.n_computed_tokens);
  EXPECT_EQ(generated, padded.output_tokens);
}

// Under the verified mode the run reports its verification (LLM-42's table 2); other modes
// report none.
TEST_F(BenchDriver, VerifiedRunReportsVerification) {
  const RunResult plain = run_offline(*model_, engine_, workload_, 100, 9, {}, {});
  EXPECT_EQ(plain.n_verify_windows, 0);
  EXPECT_EQ(plain.verify_share(), 0.0);
  engine::EngineConfig verified = engine_;
  apply_mode(DeterminismMode::kVerified, verified);
  const RunResult r = run_offline(*model_, verified, workload_, 100, 9, {}, {});
  EXPECT_EQ(r.output_tokens, plain.output_tokens);
  EXPECT_GT(r.n_verify_windows, 0);
  EXPECT_GT(r.n_verify_tokens, 0);
  EXPECT_GT(r.verify_share(), 0.0);
  EXPECT_LT(r.verify_share(), 1.0);
  EXPECT_EQ(r.n_rollbacks, 0);  // on the CPU the fast and invariant GEMMs are the same kernels
}

// --verify-window / --verify-group-tokens reach the engine: each planned verified run gets its
// window and group size; the window changes how many windows are verified.
TEST_F(BenchDriver, VerifySettingsReachTheEngine) {
  VerifyOptions v;
  v.window = 2;
  v.group_tokens = {3, 64};
  const std::vector<ModeRun> runs = plan_mode_runs({DeterminismMode::kVerified}, v);
  ASSERT_EQ(runs.size(), 2u);
  engine::EngineConfig base = engine_;
  apply_mode(DeterminismMode::kVerified, base);
  const RunResult default_window = run_offline(*model_, base, workload_, 100, 9, {}, {});
  for (const ModeRun& run : runs) {
    engine::EngineConfig c = base;
    c.verify = verify_config_for(run, v, c.verify);
    EXPECT_EQ(c.verify.window, 2);
    const RunResult r = run_offline(*model_, c, workload_, 100, 9, {}, {});
    EXPECT_EQ(r.output_tokens, workload_.n_output_tokens()) << run.label;
    // Windows of 2 candidates: more of them than with the default window of 16.
    EXPECT_GT(r.n_verify_windows, default_window.n_verify_windows) << run.label;
    EXPECT_LE(r.n_verify_tokens, r.n_verify_windows * 3) << run.label;  // window + 1 rows each
  }
}

TEST_F(BenchDriver, OnlineArrivalsAndClasses) {
  const RunResult r = run_online(*model_, engine_, workload_, 2000.0, 0, 3);
  EXPECT_TRUE(r.online());
  EXPECT_EQ(r.n_deterministic, 0);
  EXPECT_EQ(r.det.e2e_ms.n, 0);
  EXPECT_EQ(r.other.e2e_ms.n, 6);
  EXPECT_EQ(r.output_tokens, workload_.n_output_tokens());
  const std::vector<double> arrivals = poisson_arrivals(6, 2000.0, 3);
  for (size_t i = 0; i < r.requests.size(); ++i) {
    EXPECT_EQ(r.requests[i].arrival_s, arrivals[i]);
    EXPECT_GE(r.requests[i].first_token_s, r.requests[i].arrival_s);
  }
  EXPECT_GE(r.duration_s, arrivals.back());
}

TEST(BenchMetrics, PercentilesFollowNumpy) {
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  std::vector<double> v(101);
  for (int i = 0; i <= 100; ++i) v[static_cast<size_t>(i)] = i;
  EXPECT_DOUBLE_EQ(percentile(v, 99), 99.0);
  EXPECT_DOUBLE_EQ(percentile({1, 2}, 99), 1.99);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0.0);
  const LatencySummary s = summarize({1, 2, 3, 10});
  EXPECT_EQ(s.n, 4);
  EXPECT_DOUBLE_EQ(s.mean, 4.0);
  EXPECT_DOUBLE_EQ(s.p50, 2.5);
}

TEST(BenchMetrics, DefaultKvPoolHoldsEveryRequestUpToTheCap) {
  const ModelConfig c = synthetic_config("tiny-llama");
  Workload w;
  w.requests = {{std::vector<int32_t>(20, 1), 5}, {std::vector<int32_t>(40, 1), 10}};
  // 25 -> 32 and 50 -> 64 tokens in blocks of 16, plus one block.
  EXPECT_EQ(default_kv_cache_tokens(w, c, 16, int64_t{1} << 30), 32 + 64 + 16);
  // Capped by bytes (2 layers x K,V x 2 heads x 16 x 4 B = 512 B per token), never below the
  // longest request.
  EXPECT_EQ(default_kv_cache_tokens(w, c, 16, 512 * 60), 60);
  EXPECT_EQ(default_kv_cache_tokens(w, c, 16, 512), 50);
}

}  // namespace
}  // namespace detllm::bench
