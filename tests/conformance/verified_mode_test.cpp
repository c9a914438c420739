// The `verified` mode (LLM-42; docs/modes.md) on the CPU: deterministic requests decode on a
// fast path that really differs from the invariant one (PerturbedFastOps: an m-dependent
// epsilon on every GEMM output while fast numerics are selected), windows are verified on the
// invariant numerics and rolled back at the first mismatch — and every deterministic request
// must come out bit-identical to the `invariant` mode's: tokens, logprobs, and the fp32 logits
// of every output position. Rollbacks are asserted to happen. Variations: window sizes, n > 1
// samples, stop tokens and max_tokens inside a window, chunked verification, preemption
// during verification, prefix cache warm and partial, staggered arrivals, non-deterministic
// neighbours (served, not compared).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>

#include "conformance/verified_run.h"
#include "core/error.h"
#include "determinism/modes.h"
#include "engine/engine.h"
#include "model/llama_model.h"
#include "model/synthetic.h"
#include "perturbed_fast_ops.h"
#include "verify/conformance.h"

namespace detllm::conformance {
namespace {

constexpr float kPerturbation = 2e-3f;

engine::EngineConfig base_engine() {
  engine::EngineConfig e = base_engine_config();
  e.self_check = SelfCheckVerdict::disabled();
  return e;
}

class VerifiedMode : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    config_ = synthetic_config(GetParam());
    weights_ = make_synthetic_weights(config_, 42);
  }
  WorkloadSpec spec(int32_t n) const {
    WorkloadSpec s;
    s.n_requests = n;
    s.vocab_size = config_.vocab_size;
    s.max_new_tokens = 40;
    return s;
  }
  Outcome run(DeterminismMode mode, const engine::EngineConfig& ec,
              const std::vector<engine::Request>& reqs,
              const std::vector<engine::Request>& warmup = {},
              const std::vector<int32_t>& arrival = {}) {
    // A fresh backend and model per run (as the conformance harness does).
    PerturbedFastOps ops(2, kPerturbation);
    LlamaModel model(config_, weights_, ops);
    return run_verified_workload(model, mode, ec, reqs, warmup, arrival);
  }
  // Every deterministic request of `got` equals `ref` bit for bit.
  void expect_same(const std::vector<engine::Request>& reqs, const Outcome& ref, const Outcome& got,
                   const std::string& context) {
    const auto m = first_mismatch(reqs, ref.traces, got.traces);
    ASSERT_FALSE(m.has_value()) << context << ": " << m->what;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (!reqs[i].deterministic.value_or(true)) continue;
      ASSERT_EQ(ref.traces[i].finish, got.traces[i].finish) << context << ": request " << i;
    }
  }
  ModelConfig config_;
  ModelWeights weights_;
};

// The core claim: several window sizes, random workloads (greedy and seeded sampling, n = 2,
// prompt logprobs, scoring requests), all equal to the invariant mode, with rollbacks.
TEST_P(VerifiedMode, EqualsInvariantAcrossWindows) {
  int64_t rollbacks = 0;
  for (uint64_t seed : {11, 12}) {
    const auto reqs = random_workload(seed, spec(8));
    const Outcome ref = run(DeterminismMode::kInvariant, base_engine(), reqs);
    for (int32_t window : {1, 4, 16, 32}) {
      engine::EngineConfig ec = base_engine();
      ec.verify.window = window;
      ec.verify.group_tokens = std::max(64, window + 1);
      const Outcome got = run(DeterminismMode::kVerified, ec, reqs);
      const std::string label =
          "seed " + std::to_string(seed) + " window " + std::to_string(window);
      print_verified_stats(GetParam() + " " + label, got);
      expect_same(reqs, ref, got, label);
      EXPECT_GT(got.stats.n_candidate_tokens, 0) << label;
      EXPECT_GT(got.stats.n_verify_steps, 0) << label;
      EXPECT_EQ(got.stats.n_generated_tokens, ref.stats.n_generated_tokens) << label;
      rollbacks += got.stats.n_rollbacks;
    }
  }
  EXPECT_GT(rollbacks, 0) << "the perturbed fast path never produced a rejected candidate";
}

// Stop tokens and max_tokens that fall inside a window: the request must stop exactly where
// the invariant mode stops (a candidate stop is verified first; a stop inside a verified
// window discards the rest).
TEST_P(VerifiedMode, StopsInsideAWindow) {
  auto reqs = random_workload(21, spec(6));
  for (auto& r : reqs) {
    if (r.max_tokens == 0) r.max_tokens = 3;  // no scoring here
    r.max_tokens = 24;
    r.ignore_eos = true;
  }
  const Outcome free_run = run(DeterminismMode::kInvariant, base_engine(), reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& toks = free_run.traces[i].tokens[0];
    if (i % 2 == 0 && toks.size() > 6) {
      reqs[i].stop_token_ids = {toks[5 + i % 3]};  // stops at (or before) that token
    } else {
      reqs[i].max_tokens = 5 + static_cast<int32_t>(i);  // inside the first window
    }
  }
  const Outcome ref = run(DeterminismMode::kInvariant, base_engine(), reqs);
  for (int32_t window : {4, 16}) {
    engine::EngineConfig ec = base_engine();
    ec.verify.window = window;
    const Outcome got = run(DeterminismMode::kVerified, ec, reqs);
    print_verified_stats(GetParam() + " stops, window " + std::to_string(window), got);
    expect_same(reqs, ref, got, "stops, window " + std::to_string(window));
  }
}

// Verification rows split over several steps by the chunk size and budget, and staggered
// arrivals (windows of different requests become ready at different steps).
TEST_P(VerifiedMode, ChunkedVerificationAndArrivals) {
  const auto reqs = random_workload(31, spec(7));
  const Outcome ref = run(DeterminismMode::kInvariant, base_engine(), reqs);
  std::mt19937 rng(3);
  for (int32_t chunk : {1, 5, 16}) {
    engine::EngineConfig ec = base_engine();
    ec.scheduler.chunk_size = chunk;
    ec.scheduler.max_tokens_per_step = std::max(chunk, 12);
    ec.verify.window = 8;
    ec.verify.group_min_requests = 2;
    std::vector<int32_t> arrival;
    for (size_t i = 0; i < reqs.size(); ++i) arrival.push_back(static_cast<int32_t>(rng() % 12));
    const Outcome got = run(DeterminismMode::kVerified, ec, reqs, {}, arrival);
    print_verified_stats(GetParam() + " chunk " + std::to_string(chunk), got);
    expect_same(reqs, ref, got, "chunk " + std::to_string(chunk));
  }
}

// A KV pool so small that sequences are preempted, also while windows wait or verify: the
// candidates are dropped and the committed tokens recomputed on the invariant numerics.
TEST_P(VerifiedMode, PreemptionDuringVerification) {
  WorkloadSpec s = spec(6);
  s.max_prompt = 30;
  s.scoring_share = 0;
  const auto reqs = random_workload(41, s);
  const Outcome ref = run(DeterminismMode::kInvariant, base_engine(), reqs);
  int64_t preemptions = 0;
  for (int32_t n_blocks : {24, 32}) {
    engine::EngineConfig ec = base_engine();
    ec.scheduler.kv.n_blocks = n_blocks;
    ec.scheduler.kv.shuffle_blocks = true;
    ec.scheduler.kv.shuffle_seed = 7;
    ec.verify.window = 6;
    const Outcome got = run(DeterminismMode::kVerified, ec, reqs);
    print_verified_stats(GetParam() + " " + std::to_string(n_blocks) + " blocks", got);
    expect_same(reqs, ref, got, std::to_string(n_blocks) + " blocks");
    preemptions += got.preemptions;
  }
  EXPECT_GT(preemptions, 0) << "the small pools never preempted";
}

// Prefix cache on: warm (the same workload ran before) and partial (prompts cut in half ran
// before). Only trusted (invariant) KV of committed tokens is published, so the hits are
// reusable by any deterministic request.
TEST_P(VerifiedMode, PrefixCacheWarmAndPartial) {
  const auto reqs = random_workload(51, spec(8));
  engine::EngineConfig cold = base_engine();
  cold.scheduler.kv.enable_prefix_cache = false;
  const Outcome ref = run(DeterminismMode::kInvariant, cold, reqs);
  engine::EngineConfig ec = base_engine();
  ec.verify.window = 5;
  const Outcome warm = run(DeterminismMode::kVerified, ec, reqs, reqs);
  print_verified_stats(GetParam() + " warm cache", warm);
  expect_same(reqs, ref, warm, "warm cache");
  EXPECT_GT(warm.cached_tokens, 0);
  // Generated continuations as prompts: the verified run's committed blocks must be hit.
  std::vector<engine::Request> cont;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].max_tokens == 0 || ref.traces[i].tokens[0].size() < 8) continue;
    engine::Request r = reqs[i];
    r.prompt.insert(r.prompt.end(), ref.traces[i].tokens[0].begin(), ref.traces[i].tokens[0].end());
    r.max_tokens = 4;
    r.n = 1;
    r.prompt_logprobs = -1;
    cont.push_back(r);
  }
  ASSERT_FALSE(cont.empty());
  const Outcome cont_ref = run(DeterminismMode::kInvariant, cold, cont);
  const Outcome cont_got = run(DeterminismMode::kVerified, ec, cont, reqs);
  print_verified_stats(GetParam() + " continuation", cont_got);
  expect_same(cont, cont_ref, cont_got, "continuations after a verified run");
  EXPECT_GT(cont_got.cached_tokens, 0);

  std::vector<engine::Request> halves;
  for (auto r : reqs) {
    r.prompt.resize((r.prompt.size() + 1) / 2);
    r.max_tokens = 7;
    r.prompt_logprobs = -1;
    halves.push_back(r);
  }
  const Outcome partial = run(DeterminismMode::kVerified, ec, reqs, halves);
  expect_same(reqs, ref, partial, "partial cache");
}

// Non-deterministic requests in the same engine run fast, are never verified, and finish.
TEST_P(VerifiedMode, NonDeterministicNeighboursServed) {
  WorkloadSpec s = spec(10);
  s.nondet_share = 0.5;
  const auto reqs = random_workload(61, s);
  std::vector<engine::Request> det;
  for (const auto& r : reqs)
    if (r.deterministic.value_or(true)) det.push_back(r);
  ASSERT_FALSE(det.empty());
  ASSERT_LT(det.size(), reqs.size());
  const Outcome alone = run(DeterminismMode::kInvariant, base_engine(), det);
  engine::EngineConfig ec = base_engine();
  ec.verify.window = 8;
  const Outcome got = run(DeterminismMode::kVerified, ec, reqs);
  print_verified_stats(GetParam() + " with neighbours", got);
  size_t j = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!reqs[i].deterministic.value_or(true)) {
      for (size_t k = 0; k < got.traces[i].finish.size(); ++k) {
        EXPECT_NE(got.traces[i].finish[k], engine::FinishReason::kNone) << "request " << i;
        if (reqs[i].max_tokens > 0) {
          EXPECT_FALSE(got.traces[i].tokens[k].empty());
        }
      }
      continue;
    }
    const auto m = compare(alone.traces[j], got.traces[i]);
    ASSERT_FALSE(m.has_value()) << "request " << i << ": " << m->what;
    ++j;
  }
  EXPECT_GT(got.stats.n_fast_steps, 0);
}

// Property rounds (30 per model): random engine settings (chunk, budget, max_seqs, pool size and
// layout, window and group settings, prefix cache on/off, warm-up), random arrivals, a share of
// non-deterministic neighbours and several perturbation sizes (rare to constant rejection):
// every deterministic request equals the invariant mode's, run alone.
TEST_P(VerifiedMode, PropertyRounds) {
  std::mt19937_64 rng(std::hash<std::string>{}(GetParam()));
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int64_t rollbacks = 0, windows = 0;
  for (int round = 0; round < 30; ++round) {
    WorkloadSpec ws = spec(static_cast<int32_t>(uniform(2, 9)));
    ws.max_prompt = static_cast<int32_t>(uniform(4, 40));
    ws.max_new_tokens = static_cast<int32_t>(uniform(2, 40));
    ws.nondet_share = round % 3 == 0 ? 0.3 : 0.0;
    const auto reqs = random_workload(1000 + static_cast<uint64_t>(round), ws);
    std::vector<engine::Request> det;
    for (const auto& r : reqs)
      if (r.deterministic.value_or(true)) det.push_back(r);
    Outcome ref;  // each deterministic request alone, invariant mode, no cache
    for (const auto& r : det) {
      engine::EngineConfig cold = base_engine();
      cold.scheduler.kv.enable_prefix_cache = false;
      ref.traces.push_back(run(DeterminismMode::kInvariant, cold, {r}).traces.at(0));
    }
    engine::EngineConfig ec = base_engine();
    ec.scheduler.chunk_size = static_cast<int32_t>(uniform(0, 3) == 0 ? 0 : uniform(1, 24));
    ec.scheduler.max_tokens_per_step = static_cast<int32_t>(uniform(8, 96));
    ec.scheduler.max_seqs = static_cast<int32_t>(uniform(1, 8));
    ec.scheduler.kv.block_size = static_cast<int32_t>(uniform(1, 3) * 2);
    ec.kv_cache_tokens = static_cast<int32_t>(uniform(0, 1) == 0 ? 4096 : 96);
    ec.scheduler.kv.shuffle_blocks = uniform(0, 1) == 1;
    ec.scheduler.kv.shuffle_seed = rng();
    ec.scheduler.kv.enable_prefix_cache = uniform(0, 3) != 0;
    ec.verify.window = static_cast<int32_t>(uniform(1, 24));
    ec.verify.group_tokens = static_cast<int32_t>(ec.verify.window + 1 + uniform(0, 64));
    ec.verify.group_min_requests = static_cast<int32_t>(uniform(1, 4));
    ec.verify.group_max_requests =
        static_cast<int32_t>(ec.verify.group_min_requests + uniform(0, 4));
    ec.verify.max_wait_steps = static_cast<int32_t>(uniform(0, 10));
    std::vector<int32_t> arrival;
    for (size_t i = 0; i < reqs.size(); ++i) {
      arrival.push_back(static_cast<int32_t>(uniform(0, 15)));
    }
    std::vector<engine::Request> warmup;
    if (uniform(0, 1) == 1) warmup.assign(reqs.begin(), reqs.begin() + 1);
    const float scales[] = {1e-5f, 2e-3f, 5e-2f};
    PerturbedFastOps ops(2, scales[round % 3]);
    LlamaModel model(config_, weights_, ops);
    Outcome got;
    try {
      got = run_verified_workload(model, DeterminismMode::kVerified, ec, reqs, warmup, arrival);
    } catch (const Error& e) {
      // A request that can never fit the small pool is refused at add_request: not this test.
      if (std::string(e.what()).find("request rejected") != std::string::npos) continue;
      throw;
    }
    const std::string label = "round " + std::to_string(round);
    print_verified_stats(GetParam() + " " + label, got);
    size_t j = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (!reqs[i].deterministic.value_or(true)) continue;
      const auto m = compare(ref.traces[j], got.traces[i]);
      ASSERT_FALSE(m.has_value()) << label << ": request " << i << ": " << m->what;
      ASSERT_EQ(ref.traces[j].finish, got.traces[i].finish) << label << ": request " << i;
      ++j;
    }
    rollbacks += got.stats.n_rollbacks;
    windows += got.stats.n_verify_windows;
  }
  EXPECT_GT(windows, 0);
  EXPECT_GT(rollbacks, 0);
}

// Control: the perturbed fast path really changes results — non-deterministic requests
// (fast, never verified) under the verified mode differ from the invariant mode's.
TEST_P(VerifiedMode, FastPathReallyDiffers) {
  WorkloadSpec s = spec(8);
  s.nondet_share = 1.0;
  s.scoring_share = 0;
  const auto reqs = random_workload(71, s);
  std::vector<engine::Request> as_det = reqs;  // the same requests, deterministic: invariant
  for (auto& r : as_det) r.deterministic = true;
  const Outcome inv = run(DeterminismMode::kInvariant, base_engine(), as_det);
  const Outcome fast = run(DeterminismMode::kVerified, base_engine(), reqs);
  EXPECT_EQ(fast.stats.n_verify_windows, 0);
  EXPECT_EQ(fast.stats.n_candidate_tokens, 0);
  int n_differ = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    n_differ += compare(inv.traces[i], fast.traces[i]).has_value();
  }
  EXPECT_GT(n_differ, 0) << "the perturbation changed nothing: the verified tests prove nothing";
}

INSTANTIATE_TEST_SUITE_P(TinyModels, VerifiedMode,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3"));

TEST(VerifiedModeConfig, SettingsValidated) {
  engine::VerifyConfig v;
  EXPECT_NO_THROW(v.validate());
  v.window = 0;
  EXPECT_THROW(v.validate(), Error);
  v = {};
  v.group_tokens = v.window;  // cannot hold one window (window + 1 rows)
  EXPECT_THROW(v.validate(), Error);
  v = {};
  v.group_min_requests = 5;
  v.group_max_requests = 4;
  EXPECT_THROW(v.validate(), Error);
}

}  // namespace
}  // namespace detllm::conformance
