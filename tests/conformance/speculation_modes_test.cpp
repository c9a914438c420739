// The speculation check (speculation_checks.h: n-gram and draft-model drafters, fixed and
// adaptive draft lengths, chunked, preempting) in every determinism mode that promises bits:
// `invariant`, `bi-naive`, `padded` (windows verified as decode rows of the fixed-shape decode
// step) and `verified` (the drafts as the deterministic requests' candidates, on a backend
// whose fast numerics really differ, so that a draft window verified on them would show).
// `fast` promises no bits. One request of the workload turns speculation off, so drafted and
// undrafted deterministic requests share steps (in `verified`: drafted windows beside the
// mode's own fast candidates).
//
// The padded mode does not promise V3/V4 (a row's bits may depend on its sequence's query
// length), so its check runs again on a backend whose attention does (`qlen-attention`,
// fault_ops.h): a window verified as one chunk of k + 1 rows — what the other modes do, and
// the control that fails below — would change bits there; decode rows do not.
#include <gtest/gtest.h>

#include "conformance/fault_ops.h"
#include "conformance/perturbed_fast_ops.h"
#include "conformance/speculation_checks.h"
#include "determinism/modes.h"
#include "model/synthetic.h"

namespace detllm::conformance {
namespace {

std::vector<engine::Request> workload(int32_t vocab_size) {
  auto reqs = repetitive_workload(23, vocab_size, 6);
  reqs[4].speculation = false;
  return reqs;
}

Target target_for(DeterminismMode mode, const ModelConfig& config, const ModelWeights& weights) {
  Target t;
  t.name = std::string("tiny-llama ") + std::string(determinism_mode_name(mode));
  t.config = &config;
  t.weights = &weights;
  if (mode == DeterminismMode::kVerified) {
    // Fast GEMMs that differ from the invariant ones (verified_mode_test.cpp's perturbation).
    t.make_ops = [](int n) { return std::make_unique<PerturbedFastOps>(n, 2e-3f); };
  } else {
    t.make_ops = [](int n) { return kernels::make_cpu_ops(n); };
  }
  t.policy = policy_for_mode(mode, DeterminismPolicy{});
  return t;
}

TEST(SpeculationModes, CheckHoldsInEveryModeThatPromisesBits) {
  const ModelConfig config = synthetic_config("tiny-llama");
  const ModelWeights weights = make_synthetic_weights(config, 42);
  for (DeterminismMode mode : {DeterminismMode::kInvariant, DeterminismMode::kBiNaive,
                               DeterminismMode::kPadded, DeterminismMode::kVerified}) {
    const Target t = target_for(mode, config, weights);
    const SpeculationVerdict v = check_speculation(t, workload(config.vocab_size));
    ASSERT_FALSE(v.mismatch.has_value()) << t.name << ": " << v.mismatch->what;
    EXPECT_FALSE(v.not_exercised.has_value()) << t.name << ": " << *v.not_exercised;
  }
}

// The verified mode with drafts gives the invariant mode's bits (its guarantee), not only its
// own without drafts: the drafted run on the perturbed backend against plain invariant.
TEST(SpeculationModes, VerifiedWithDraftsEqualsInvariant) {
  const ModelConfig config = synthetic_config("tiny-llama");
  const ModelWeights weights = make_synthetic_weights(config, 42);
  const auto reqs = workload(config.vocab_size);
  const RunResult ref =
      run(target_for(DeterminismMode::kInvariant, config, weights), base_execution("plain"), reqs);
  Execution e = base_execution("verified, n-gram drafts K=4");
  e.engine.speculative.method = engine::SpeculativeMethod::kNgram;
  e.engine.speculative.num_speculative_tokens = 4;
  e.engine.speculative.prompt_lookup_min = 1;
  e.engine.speculative.prompt_lookup_max = 3;
  const RunResult got = run(target_for(DeterminismMode::kVerified, config, weights), e, reqs);
  const auto m = first_mismatch(reqs, ref.traces, got.traces);
  ASSERT_FALSE(m.has_value()) << m->what;
  EXPECT_GT(got.engine_stats.n_accepted_draft_tokens, 0);
  EXPECT_LT(got.engine_stats.n_accepted_draft_tokens, got.engine_stats.n_draft_tokens);
}

TEST(SpeculationModes, PaddedHoldsWhereAttentionDependsOnQueryLength) {
  const ModelConfig config = synthetic_config("tiny-llama");
  const ModelWeights weights = make_synthetic_weights(config, 42);
  auto on_fault = [&](DeterminismMode mode) {
    Target t = target_for(mode, config, weights);
    t.name += " on qlen-attention";
    t.make_ops = [](int n) { return make_fault_ops("qlen-attention", n); };
    return check_speculation(t, workload(config.vocab_size), SpeculationCases::kAll,
                             /*with_preemption=*/false);
  };
  const SpeculationVerdict padded = on_fault(DeterminismMode::kPadded);
  ASSERT_FALSE(padded.mismatch.has_value()) << padded.mismatch->what;
  EXPECT_FALSE(padded.not_exercised.has_value()) << *padded.not_exercised;
  // Control: the same fault, windows verified as chunks (the invariant mode's layout).
  const SpeculationVerdict chunked = on_fault(DeterminismMode::kInvariant);
  EXPECT_TRUE(chunked.mismatch.has_value()) << "a chunk-verified window hid the fault";
}

// Verify steps replay decode graphs (docs/speculative.md): with graphs on, a drafting
// sequence's window is verified as decode rows, so a step of decode rows and windows is a
// decode step padded to a row bucket and replayed. On the CPU backend with emulated graphs
// (fault_ops.h `graph-replay-exact`: ops recorded and replayed as a CUDA graph would) and on
// the plain CPU backend (padded eagerly), in the modes whose windows are otherwise chunks; the
// padded mode's own are decode rows already. Every case of the check gives the bits of the
// run without speculation (with the same graph setting), and verify steps were replayed.
TEST(SpeculationModes, VerifyStepsReplayDecodeGraphs) {
  const ModelConfig config = synthetic_config("tiny-llama");
  const ModelWeights weights = make_synthetic_weights(config, 42);
  for (DeterminismMode mode : {DeterminismMode::kInvariant, DeterminismMode::kBiNaive,
                               DeterminismMode::kPadded, DeterminismMode::kVerified}) {
    for (const char* backend : {"graph-replay-exact", "cpu"}) {
      const bool emulated = std::string(backend) != "cpu";
      // verified: its own backend (perturbed fast GEMMs, no graphs), padded eagerly.
      if (mode == DeterminismMode::kVerified && emulated) continue;
      Target t = target_for(mode, config, weights);
      t.name += std::string(" on ") + backend;
      if (emulated) t.make_ops = [](int n) { return make_fault_ops("graph-replay-exact", n); };
      const SpeculationVerdict v = check_speculation(
          t, workload(config.vocab_size), SpeculationCases::kNgram, true, GraphMode::kOn);
      ASSERT_FALSE(v.mismatch.has_value()) << t.name << ": " << v.mismatch->what;
      EXPECT_FALSE(v.not_exercised.has_value()) << t.name << ": " << *v.not_exercised;
      EXPECT_GT(v.n_window_row_steps_padded, 0) << t.name;
      if (emulated) {
        EXPECT_GT(v.n_window_row_steps_replayed, 0) << t.name;
      }
    }
  }
}

// Windows as decode rows are what makes a verify row a decode row: on a backend whose attention
// depends on the query length (`qlen-attention`), the invariant mode with graphs on (windows as
// decode rows, padded eagerly: the fault backend has no graphs) still gives the bits of plain
// decoding; the control — graphs off, windows verified as chunks of k + 1 rows — must fail.
// Whole prompts, no prefix-cache reuse: the fault changes chunked or cache-shortened prefills
// too (V3), which is not what this test is about.
TEST(SpeculationModes, WindowRowsHoldWhereAttentionDependsOnQueryLength) {
  const ModelConfig config = synthetic_config("tiny-llama");
  const ModelWeights weights = make_synthetic_weights(config, 42);
  Target t = target_for(DeterminismMode::kInvariant, config, weights);
  t.name += " on qlen-attention";
  t.make_ops = [](int n) { return make_fault_ops("qlen-attention", n); };
  const auto reqs = workload(config.vocab_size);
  for (GraphMode graphs : {GraphMode::kOn, GraphMode::kOff}) {
    Execution plain = base_execution("no speculation");
    plain.engine.cuda_graphs = graphs;
    const RunResult ref = run(t, plain, reqs);
    for (int32_t k : {3, 8}) {
      Execution e = base_execution("n-gram K=" + std::to_string(k));
      e.engine.cuda_graphs = graphs;
      e.engine.speculative.method = engine::SpeculativeMethod::kNgram;
      e.engine.speculative.num_speculative_tokens = k;
      e.engine.speculative.prompt_lookup_min = 1;
      e.engine.speculative.prompt_lookup_max = 3;
      const RunResult got = run(t, e, reqs);
      const auto m = first_mismatch(reqs, ref.traces, got.traces);
      EXPECT_GT(got.engine_stats.n_accepted_draft_tokens, 0);
      if (graphs == GraphMode::kOn) {
        EXPECT_FALSE(m.has_value()) << e.label << ", windows as decode rows: " << m->what;
        EXPECT_GT(got.engine_stats.n_window_row_steps_padded, 0) << e.label;
      } else {
        EXPECT_EQ(got.engine_stats.n_window_row_steps, 0) << e.label;
        EXPECT_TRUE(m.has_value()) << e.label << ": a chunk-verified window hid the fault";
      }
    }
  }
}

}  // namespace
}  // namespace detllm::conformance
