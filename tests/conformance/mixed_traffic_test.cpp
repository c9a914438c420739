// Mixed traffic in every mode (docs/modes.md, "Mixed traffic"): requests that are not
// deterministic run on the fast numerics, unconstrained, in the steps that hold no
// deterministic row; deterministic requests must not notice (V10). The backend is the CPU
// backend whose fast GEMMs really differ (PerturbedFastOps: an m-dependent epsilon), so a
// deterministic row that ran on the wrong numerics, or (padded) at a shape of the others'
// making, changes bits. For each mode: the deterministic requests run alone, then among
// non-deterministic neighbours that arrive before, with and after them; their traces (tokens,
// logprobs, fp32 logits of every output position) must be equal bit for bit, and the run must
// really have had steps of the others only — on the fast numerics where the mode's differ.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

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

struct Case {
  std::string model;
  DeterminismMode mode;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.model + "_" + std::string(determinism_mode_name(info.param.mode));
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

class MixedTraffic : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    config_ = synthetic_config(GetParam().model);
    weights_ = make_synthetic_weights(config_, 42);
  }
  engine::EngineConfig engine_config() const {
    engine::EngineConfig e = base_engine_config();
    e.self_check = SelfCheckVerdict::disabled();
    e.scheduler.max_seqs = 8;
    e.scheduler.max_tokens_per_step = 48;
    e.scheduler.chunk_size = 16;  // the others' prompts are chunked
    e.kv_cache_tokens = 4096;     // no preemption (padded does not promise V6)
    return e;
  }
  WorkloadSpec spec(int32_t n, int32_t max_new_tokens, double nondet, double scoring) const {
    WorkloadSpec w;
    w.n_requests = n;
    w.vocab_size = config_.vocab_size;
    w.max_new_tokens = max_new_tokens;
    w.nondet_share = nondet;
    w.scoring_share = scoring;
    return w;
  }
  // A fresh backend and model per run; `ec` defaults to engine_config().
  Outcome run(DeterminismMode mode, const std::vector<engine::Request>& reqs,
              const std::vector<int32_t>& arrival = {},
              const std::optional<engine::EngineConfig>& ec = std::nullopt) {
    PerturbedFastOps ops(2, kPerturbation);
    LlamaModel model(config_, weights_, ops);
    return run_verified_workload(model, mode, ec ? *ec : engine_config(), reqs, {}, arrival);
  }
  ModelConfig config_;
  ModelWeights weights_;
};

TEST_P(MixedTraffic, DeterministicRequestsDoNotNoticeTheOthers) {
  const DeterminismMode mode = GetParam().mode;
  std::vector<engine::Request> reqs = random_workload(303, spec(12, 24, 0.5, 0.1));
  // Arrivals: others first and last, deterministic ones in between and staggered.
  std::vector<int32_t> arrival(reqs.size());
  std::vector<engine::Request> det;
  std::vector<int32_t> det_arrival;
  int32_t n_det = 0, n_other = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const bool d = reqs[i].deterministic.value_or(true);
    arrival[i] = d ? 3 + 5 * n_det++ : (n_other++ % 2 == 0 ? 0 : 40);
    if (d) {
      det.push_back(reqs[i]);
      det_arrival.push_back(0);
    }
  }
  ASSERT_GE(n_det, 3);
  ASSERT_GE(n_other, 3);

  const Outcome alone = run(mode, det, det_arrival);
  const Outcome mixed = run(mode, reqs, arrival);
  size_t j = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!reqs[i].deterministic.value_or(true)) {
      for (engine::FinishReason f : mixed.traces[i].finish)
        EXPECT_NE(f, engine::FinishReason::kNone) << "request " << i << " not served";
      continue;
    }
    const auto m = compare(alone.traces[j], mixed.traces[i]);
    ASSERT_FALSE(m.has_value()) << "deterministic request " << i << ": " << m->what;
    ++j;
  }
  // The run had steps of the others only, and they ran on the fast numerics.
  const engine::EngineStats& s = mixed.stats;
  EXPECT_GT(s.n_deterministic_steps, 0);
  EXPECT_LT(s.n_deterministic_steps, s.n_steps) << "no step of the others only";
  EXPECT_GE(s.n_fast_steps, s.n_steps - s.n_deterministic_steps);
  if (mode == DeterminismMode::kInvariant || mode == DeterminismMode::kBiNaive) {
    EXPECT_EQ(s.n_invariant_steps, s.n_deterministic_steps);
  }
}

// Property rounds: random engine settings (chunk, budget, max_seqs, block size, page layout,
// prefix cache; a small pool with preemption except under padded, which does not promise V6),
// random arrivals and a random share of others: every deterministic request equals the same
// request run alone in the same mode with the default settings (padded: with the same
// settings, since its fixed decode shape is max_seqs rows).
TEST_P(MixedTraffic, PropertyRounds) {
  const DeterminismMode mode = GetParam().mode;
  std::mt19937_64 rng(std::hash<std::string>{}(GetParam().model) + static_cast<int>(mode));
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int64_t others_steps = 0;
  for (int round = 0; round < 10; ++round) {
    WorkloadSpec ws = spec(static_cast<int32_t>(uniform(3, 9)),
                           static_cast<int32_t>(uniform(2, 24)), 0.2 + 0.2 * (round % 3), 0.1);
    ws.max_prompt = static_cast<int32_t>(uniform(4, 40));
    const std::vector<engine::Request> reqs =
        random_workload(2000 + static_cast<uint64_t>(round), ws);
    engine::EngineConfig ec = engine_config();
    ec.scheduler.chunk_size = static_cast<int32_t>(uniform(0, 3) == 0 ? 0 : uniform(1, 24));
    ec.scheduler.max_tokens_per_step = static_cast<int32_t>(uniform(8, 96));
    ec.scheduler.max_seqs = static_cast<int32_t>(uniform(1, 8));
    ec.scheduler.kv.block_size = static_cast<int32_t>(uniform(1, 3) * 2);
    ec.scheduler.kv.shuffle_blocks = uniform(0, 1) == 1;
    ec.scheduler.kv.shuffle_seed = rng();
    ec.scheduler.kv.enable_prefix_cache = uniform(0, 3) != 0;
    if (mode != DeterminismMode::kPadded && uniform(0, 1) == 1) ec.kv_cache_tokens = 128;
    std::vector<int32_t> arrival;
    for (size_t i = 0; i < reqs.size(); ++i)
      arrival.push_back(static_cast<int32_t>(uniform(0, 12)));
    Outcome got;
    try {
      got = run(mode, reqs, arrival, ec);
    } catch (const Error& e) {
      // A request that can never fit the small pool is refused at add_request: not this test.
      if (std::string(e.what()).find("request rejected") != std::string::npos) continue;
      throw;
    }
    others_steps += got.stats.n_steps - got.stats.n_deterministic_steps;
    const std::string label = "round " + std::to_string(round);
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (!reqs[i].deterministic.value_or(true)) continue;
      // padded's fixed decode shape is its max_seqs (CoRun's batch size): alone under the
      // same settings there; the other modes promise the bits under any settings.
      const Outcome alone =
          mode == DeterminismMode::kPadded ? run(mode, {reqs[i]}, {}, ec) : run(mode, {reqs[i]});
      const auto m = compare(alone.traces.at(0), got.traces[i]);
      ASSERT_FALSE(m.has_value()) << label << ": request " << i << ": " << m->what;
      ASSERT_EQ(alone.traces.at(0).finish, got.traces[i].finish) << label << ": request " << i;
    }
  }
  EXPECT_GT(others_steps, 0) << "no round had a step of the others only";
}

// Control: the others' results are not those of deterministic requests — they ran fast (or,
// padded, at shapes of the batch's making) — so the bit-equality above is not vacuous.
TEST_P(MixedTraffic, TheOthersReallyRanOnTheFastPath) {
  const DeterminismMode mode = GetParam().mode;
  const std::vector<engine::Request> others = random_workload(304, spec(8, 16, 1.0, 0.0));
  std::vector<engine::Request> as_det = others;
  for (auto& r : as_det) r.deterministic = true;
  // padded: the deterministic version runs isolated at the fixed shape; the others batched.
  const Outcome det =
      run(mode == DeterminismMode::kPadded ? mode : DeterminismMode::kInvariant, as_det);
  const Outcome got = run(mode, others);
  EXPECT_EQ(got.stats.n_deterministic_steps, 0);
  int n_differ = 0;
  for (size_t i = 0; i < others.size(); ++i)
    n_differ += compare(det.traces[i], got.traces[i]).has_value();
  EXPECT_GT(n_differ, 0) << "the others' results equal the deterministic ones: this test "
                            "cannot tell the two paths apart";
}

INSTANTIATE_TEST_SUITE_P(Modes, MixedTraffic,
                         ::testing::Values(Case{"tiny-llama", DeterminismMode::kInvariant},
                                           Case{"tiny-llama", DeterminismMode::kBiNaive},
                                           Case{"tiny-llama", DeterminismMode::kPadded},
                                           Case{"tiny-llama", DeterminismMode::kVerified},
                                           Case{"tiny-qwen2", DeterminismMode::kInvariant},
                                           Case{"tiny-qwen3", DeterminismMode::kPadded}),
                         case_name);

}  // namespace
}  // namespace detllm::conformance
