// The speculation check (speculation_checks.h: n-gram and draft-model drafters, fixed and
// adaptive draft lengths, chunked, preempting) in every determinism mode that speculates:
// `invariant` and `bi-naive` (`fast` promises no bits; `verified` and `padded` refuse
// speculation by name, tests/engine/speculation_test.cpp, docs/speculative.md says why).
#include <gtest/gtest.h>

#include "conformance/speculation_checks.h"
#include "determinism/modes.h"
#include "model/synthetic.h"

namespace detllm::conformance {
namespace {

TEST(SpeculationModes, CheckHoldsInEveryModeThatSpeculates) {
  const ModelConfig config = synthetic_config("tiny-llama");
  const ModelWeights weights = make_synthetic_weights(config, 42);
  for (DeterminismMode mode : {DeterminismMode::kInvariant, DeterminismMode::kBiNaive}) {
    Target t;
    t.name = std::string("tiny-llama ") + std::string(determinism_mode_name(mode));
    t.config = &config;
    t.weights = &weights;
    t.make_ops = [](int n) { return kernels::make_cpu_ops(n); };
    t.policy = policy_for_mode(mode, DeterminismPolicy{});
    const auto reqs = repetitive_workload(23, config.vocab_size, 6);
    const SpeculationVerdict v = check_speculation(t, reqs);
    ASSERT_FALSE(v.mismatch.has_value()) << t.name << ": " << v.mismatch->what;
    EXPECT_FALSE(v.not_exercised.has_value()) << t.name << ": " << *v.not_exercised;
  }
}

}  // namespace
}  // namespace detllm::conformance
