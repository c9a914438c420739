// Speculative decoding on the GPU (docs/speculative.md): n-gram drafts change no bit of a
// deterministic request — tokens, logprobs, top logprobs and the fp32 logits of every output
// position equal the run without speculation — on the tiny synthetic models, in the modes that
// promise bits: invariant with graphs off (windows verified as chunks of k + 1 rows, eagerly)
// and on (windows as decode rows, verify steps padded to a row bucket and replayed from the
// decode graphs), bi-naive and verified with graphs on, and padded (its fixed-shape decode
// step, replayed). With graphs on, verify steps must really have been replayed
// (EngineStats::n_window_row_steps_replayed). The check (speculation_checks.h) covers K = 1, 3
// and 8, chunked windows, a pool that preempts and a prefix cache warmed by a speculative run;
// the draft-model drafter too on tiny-llama.
// The attention of windows as decode rows under every kernel, and the negative control (a
// layout-dependent kernel on which decode-row windows hold and chunk windows fail):
// cuda_attention_tc_test.cpp. Skips without a GPU.
// Run: build/tests/test_cuda --gtest_filter='*CudaSpeculation*'
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>

#include "conformance/speculation_checks.h"
#include "cuda/cuda_test_util.h"
#include "determinism/modes.h"
#include "model/synthetic.h"

namespace detllm::conformance {
namespace {

std::vector<engine::Request> workload(int32_t vocab_size) {
  auto reqs = repetitive_workload(23, vocab_size, 6);
  reqs[4].speculation = false;  // drafted and undrafted deterministic requests share steps
  return reqs;
}

Target gpu_target(DeterminismMode mode, const std::string& model, const ModelConfig& config,
                  const ModelWeights& weights) {
  Target t;
  t.name = model + " " + std::string(determinism_mode_name(mode));
  t.config = &config;
  t.weights = &weights;
  t.policy = policy_for_mode(mode, DeterminismPolicy{});
  const BackendNumerics numerics = mode_info(mode).backend;
  t.make_ops = [numerics](int) {
    kernels::CudaOptions o = kernels::cuda_options_for(numerics, 0);
    o.kv_dtype = kernels::cuda_testing::test_kv_dtype();
    return kernels::make_cuda_ops(o);
  };
  return t;
}

struct SpecCase {
  DeterminismMode mode;
  GraphMode graphs;
};

class CudaSpeculation : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaSpeculation, NgramDraftsChangeNoBit) {
  DETLLM_SKIP_WITHOUT_GPU();
  const ModelConfig config = synthetic_config(GetParam());
  const ModelWeights weights = make_synthetic_weights(config, 42);
  const bool first = std::string(GetParam()) == "tiny-llama";
  const SpecCase cases[] = {{DeterminismMode::kInvariant, GraphMode::kOff},
                            {DeterminismMode::kInvariant, GraphMode::kOn},
                            {DeterminismMode::kBiNaive, GraphMode::kOn},
                            {DeterminismMode::kVerified, GraphMode::kOn},
                            {DeterminismMode::kPadded, GraphMode::kOn}};  // padded: its own
  for (const SpecCase& c : cases) {
    const Target t = gpu_target(c.mode, GetParam(), config, weights);
    const std::string label = t.name + ", graphs " + graph_mode_name(c.graphs);
    // The draft-model cases (as costly again) on one model, in invariant with graphs on.
    const bool drafters =
        first && c.mode == DeterminismMode::kInvariant && c.graphs == GraphMode::kOn;
    const SpeculationVerdict v =
        check_speculation(t, workload(config.vocab_size),
                          drafters ? SpeculationCases::kAll : SpeculationCases::kNgram,
                          /*with_preemption=*/true, c.graphs);
    ASSERT_FALSE(v.mismatch.has_value()) << label << ": " << v.mismatch->what;
    EXPECT_FALSE(v.not_exercised.has_value()) << label << ": " << *v.not_exercised;
    std::printf(
        "  [%s] drafts %lld, accepted %lld; window-row steps %lld, padded %lld, "
        "replayed %lld\n",
        label.c_str(), static_cast<long long>(v.n_draft_tokens),
        static_cast<long long>(v.n_accepted_draft_tokens),
        static_cast<long long>(v.n_window_row_steps),
        static_cast<long long>(v.n_window_row_steps_padded),
        static_cast<long long>(v.n_window_row_steps_replayed));
    if (c.graphs == GraphMode::kOn) {
      EXPECT_GT(v.n_window_row_steps_replayed, 0) << label << ": no verify step was replayed";
    } else if (c.mode != DeterminismMode::kPadded) {
      EXPECT_EQ(v.n_window_row_steps, 0) << label << ": graphs off verifies windows as chunks";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaSpeculation,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace detllm::conformance
