// The `verified` mode (LLM-42; docs/modes.md) on the GPU: one invariant CudaOps object whose
// GEMM the runner switches per step (fast steps: default cuBLAS; invariant steps: our GEMM /
// verified cuBLASLt plans), CUDA graphs on (keyed per numerics). Every deterministic request
// must equal the `invariant` mode's on the same model bit for bit (tokens, logprobs, fp32
// logits of every output position). Tiny models (cuBLAS may agree with ours there: few or no
// rollbacks) and the 4096-wide Llama-3.1-8B layers (default cuBLAS changes the o/down split
// with M: candidates get rejected). Prints the verification statistics of every run.
// CPU counterpart (with a perturbed fast path): tests/conformance/verified_mode_test.cpp.
// Run: build-cuda/tests/test_cuda --gtest_filter='*CudaVerified*'.
#include <gtest/gtest.h>

#include "conformance/verified_run.h"
#include "cuda/cuda_test_util.h"
#include "model/synthetic.h"
#include "verify/guarantee_matrix.h"

namespace detllm::conformance {
namespace {

using kernels::cuda_testing::invariant_ops;

engine::EngineConfig gpu_engine() {
  engine::EngineConfig e;
  e.scheduler.kv.block_size = 16;
  e.kv_cache_tokens = 16384;
  e.scheduler.max_tokens_per_step = 512;
  e.scheduler.chunk_size = 64;
  e.scheduler.max_seqs = 64;
  e.self_check = SelfCheckVerdict::disabled();
  return e;  // cuda_graphs: auto (on)
}

void expect_same(const std::vector<engine::Request>& reqs, const Outcome& ref, const Outcome& got,
                 const std::string& context) {
  const auto m = first_mismatch(reqs, ref.traces, got.traces);
  ASSERT_FALSE(m.has_value()) << context << ": " << m->what;
}

class CudaVerified : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaVerified, EqualsInvariantTinyModels) {
  DETLLM_SKIP_WITHOUT_GPU();
  const ModelConfig cfg = synthetic_config(GetParam());
  const ModelWeights w = make_synthetic_weights(cfg, 42);
  auto ops = invariant_ops();
  LlamaModel model(cfg, w, *ops);
  WorkloadSpec spec;
  spec.n_requests = 12;
  spec.vocab_size = cfg.vocab_size;
  spec.max_new_tokens = 40;
  spec.nondet_share = 0.25;
  const auto reqs = random_workload(7, spec);
  const Outcome ref = run_verified_workload(model, DeterminismMode::kInvariant, gpu_engine(), reqs);
  for (int32_t window : {4, 16}) {
    engine::EngineConfig ec = gpu_engine();
    ec.verify.window = window;
    const int64_t replays = model.step_stats().n_graph_replays;
    const Outcome got = run_verified_workload(model, DeterminismMode::kVerified, ec, reqs);
    print_verified_stats(std::string(GetParam()) + " window " + std::to_string(window), got);
    expect_same(reqs, ref, got, "window " + std::to_string(window));
    EXPECT_GT(got.stats.n_fast_steps, 0);
    EXPECT_GT(got.stats.n_candidate_tokens, 0);
    EXPECT_GT(model.step_stats().n_graph_replays, replays) << "no step replayed a CUDA graph";
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaVerified,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3"));

TEST(CudaVerifiedWide, EqualsInvariantOnLlama8bLayers) {
  DETLLM_SKIP_WITHOUT_GPU();
  const auto mm = make_matrix_model("wide", /*wide_layers=*/2, /*wide_vocab=*/4096);
  auto ops = invariant_ops();
  LlamaModel model(mm->config, *mm->recipe, *ops);
  WorkloadSpec spec;
  spec.n_requests = 16;
  spec.vocab_size = mm->config.vocab_size;
  spec.max_prompt = 200;
  spec.max_new_tokens = 48;
  spec.nondet_share = 0.25;
  const auto reqs = random_workload(9, spec);
  const Outcome ref = run_verified_workload(model, DeterminismMode::kInvariant, gpu_engine(), reqs);
  for (int32_t window : {8, 32}) {
    engine::EngineConfig ec = gpu_engine();
    ec.verify.window = window;
    const Outcome got = run_verified_workload(model, DeterminismMode::kVerified, ec, reqs);
    print_verified_stats("llama-8b-wide window " + std::to_string(window), got);
    expect_same(reqs, ref, got, "window " + std::to_string(window));
    EXPECT_GT(got.stats.n_candidate_tokens, 0);
  }
}

}  // namespace
}  // namespace detllm::conformance
