// Logit penalties (presence, frequency, repetition, logit_bias) through the engine: random
// workloads whose sampled requests carry penalties, run under the execution variations of the
// conformance harness — batch vs each request alone (V1), staggered arrival (V2), chunked
// prefill (V3), preemption and recompute (V6), shuffled pages (V7), thread count (V11), host
// sampling — and the verified mode against the invariant one: tokens, logprobs and top
// logprobs (the penalised row's bits) and the model's logits, bit for bit. And the spec:
// every reported logprob is logprob_of(penalize_row_reference(model logits, history)).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "conformance/execution_variations.h"
#include "conformance/verified_run.h"
#include "determinism/modes.h"
#include "kernels/sampling/logit_penalties.h"
#include "kernels/sampling/sampler.h"
#include "model/llama_model.h"
#include "model/synthetic.h"
#include "perturbed_fast_ops.h"
#include "verify/conformance.h"

namespace detllm::conformance {
namespace {

// Penalties on 3 of every 4 sampled requests, drawn from their own generator (the workload's
// other draws are random_workload's).
void add_penalties(std::vector<engine::Request>& reqs, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  auto uniform = [&](float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(rng() >> 8) * 0x1p-24f;
  };
  for (size_t i = 0; i < reqs.size(); ++i) {
    SamplingParams& p = reqs[i].sampling;
    if (reqs[i].max_tokens == 0 || i % 4 == 3) continue;
    p.presence_penalty = uniform(-0.5f, 2.0f);
    p.frequency_penalty = i % 2 ? uniform(-0.5f, 2.0f) : 0.0f;
    p.repetition_penalty = i % 3 ? uniform(0.8f, 1.8f) : 1.0f;
    for (int32_t t = static_cast<int32_t>(rng() % 7); t < vocab; t += 1 + rng() % 40) {
      p.logit_bias.push_back({t, uniform(-5.0f, 5.0f)});
    }
    p.validate(vocab);
  }
}

class Penalties : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = synthetic_config("tiny-llama");
    weights_ = make_synthetic_weights(config_, 42);
    target_.name = "tiny-llama";
    target_.config = &config_;
    target_.weights = &weights_;
    target_.make_ops = [](int n) { return kernels::make_cpu_ops(n); };
    WorkloadSpec s;
    s.n_requests = 8;
    s.vocab_size = config_.vocab_size;
    s.max_prompt = 30;
    s.max_new_tokens = 24;
    s.scoring_share = 0.1;
    reqs_ = random_workload(5, s);
    add_penalties(reqs_, config_.vocab_size, 77);
  }
  ModelConfig config_;
  ModelWeights weights_;
  Target target_;
  std::vector<engine::Request> reqs_;
};

TEST_F(Penalties, WorkloadHasPenalisedSampledRequests) {
  int n = 0;
  for (const auto& r : reqs_) n += r.sampling.has_penalties() && r.max_tokens > 0;
  EXPECT_GE(n, 4);
}

// What the engine reports is the spec: the logprob and top logprobs of each generated token
// are those of the model's logits (captured) penalised by the whole-row reference over the
// sequence's tokens before it; and the penalties change what is generated.
TEST_F(Penalties, ReportedLogprobsAreThoseOfThePenalisedReferenceRow) {
  const RunResult got = run(target_, base_execution("batch"), reqs_);
  std::vector<engine::Request> plain = reqs_;
  for (auto& r : plain) {
    r.sampling.presence_penalty = r.sampling.frequency_penalty = 0.0f;
    r.sampling.repetition_penalty = 1.0f;
    r.sampling.logit_bias.clear();
  }
  const RunResult unpenalised = run(target_, base_execution("plain"), plain);
  int64_t checked = 0;
  int changed = 0;
  for (size_t i = 0; i < reqs_.size(); ++i) {
    const engine::Request& r = reqs_[i];
    const RequestTrace& t = got.traces[i];
    if (r.max_tokens == 0) continue;
    changed += r.sampling.has_penalties() && t.tokens != unpenalised.traces[i].tokens;
    for (size_t k = 0; k < t.tokens.size(); ++k) {
      std::vector<int32_t> history = r.prompt;
      for (size_t j = 0; j < t.tokens[k].size(); ++j) {
        const int32_t pos = static_cast<int32_t>(history.size());
        const auto it = t.logits.find({static_cast<int32_t>(k), pos});
        ASSERT_NE(it, t.logits.end()) << "request " << i << " position " << pos;
        std::vector<float> row = it->second;
        penalize_row_reference(row, r.sampling, history, static_cast<int32_t>(r.prompt.size()));
        const float want = logprob_of(row, t.tokens[k][j]);
        ASSERT_EQ(std::memcmp(&want, &t.logprobs[k][j], 4), 0)
            << "request " << i << " sample " << k << " token " << j;
        const auto top = top_logprobs(row, r.sampling.n_logprobs);
        ASSERT_EQ(top, t.top_logprobs[k][j]) << "request " << i << " token " << j;
        if (r.sampling.is_greedy()) {
          ASSERT_EQ(top_logprobs(row, 1)[0].token, t.tokens[k][j]);
        }
        history.push_back(t.tokens[k][j]);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 60);
  EXPECT_GE(changed, 2) << "the penalties changed no request's tokens";
}

TEST_F(Penalties, SameBitsUnderEveryExecutionVariation) {
  expect_same_under_variations(target_, reqs_, run(target_, base_execution("batch"), reqs_));
}

// The verified mode (fast candidates, verification on the invariant numerics, rollbacks)
// gives the invariant mode's bits with penalties too, also when it preempts.
TEST_F(Penalties, VerifiedModeEqualsInvariant) {
  auto run_mode = [&](DeterminismMode mode, engine::EngineConfig ec) {
    PerturbedFastOps ops(2, 2e-3f);
    LlamaModel model(config_, weights_, ops);
    return run_verified_workload(model, mode, ec, reqs_);
  };
  engine::EngineConfig ec = base_engine_config();
  ec.self_check = SelfCheckVerdict::disabled();
  const auto ref = run_mode(DeterminismMode::kInvariant, ec);
  ec.verify.window = 5;
  const auto verified = run_mode(DeterminismMode::kVerified, ec);
  EXPECT_GT(verified.stats.n_rollbacks, 0);
  auto m = first_mismatch(reqs_, ref.traces, verified.traces);
  EXPECT_FALSE(m.has_value()) << "verified: " << m->what;
  ec.scheduler.kv.n_blocks = 24;
  const auto small = run_mode(DeterminismMode::kVerified, ec);
  EXPECT_GT(small.preemptions, 0);
  m = first_mismatch(reqs_, ref.traces, small.traces);
  EXPECT_FALSE(m.has_value()) << "verified, preempting: " << m->what;
}

}  // namespace
}  // namespace detllm::conformance
