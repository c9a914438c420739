// The shared conformance suite (tests/conformance/conformance_suite.h: V1–V7, V9, V10 and the
// property-based rounds) with the CUDA backend in invariant mode, on the same synthetic tiny
// models as the CPU suite (the mixture-of-experts tiny-qwen3-moe too, whose router ties in every
// step: its experts on the GPU's MoE kernels, eagerly), with FP8 projections ("@fp8": the GPU's
// FP8 linears, per-token activations and the FP8 wgmma GEMM at every m; "@fp8g": 128×128 weight
// blocks with activations per token and 128 columns, the GEMM's block form; "tiny-qwen3-moe@fp8"
// and "@fp8g": FP8 experts, each group on the FP8 linear), with the FP8 KV cache
// ("+kvfp8": --kv-dtype fp8, E4M3 codes read by the packed CTA), and at TP 2 ("#tp2": two CUDA ranks as threads on the one GPU, the
// same bits as TP 1). V11 (CPU threads) has no GPU counterpart. Plus: GPU logits close to the CPU
// backend on bf16-rounded weights.
// Run: build-cuda/tests/test_cuda --gtest_filter='Gpu/Conformance*' (skips without a GPU).
#include <cmath>
#include <string_view>

#include "conformance/conformance_suite.h"
#include "cuda/cuda_test_util.h"

namespace detllm::conformance {

std::unique_ptr<kernels::Ops> suite_make_ops(int) {
  // The running test's parameter names the KV class ("tiny-llama@fp8+kvfp8": --kv-dtype fp8).
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string_view param =
      info != nullptr && info->value_param() != nullptr ? info->value_param() : "";
  if (param.find("+kvfp8") != std::string_view::npos)
    return kernels::cuda_testing::invariant_ops(-1, DType::kF8E4M3);
  return kernels::cuda_testing::invariant_ops();
}
bool suite_backend_available(std::string* why) {
  *why = kernels::cuda_testing::gpu_unavailable_reason();
  if (why->empty()) return true;
  // The suite skips with `why`; with DETLLM_REQUIRE_GPU=1 the skip is a failure (require_gpu.h).
  if (kernels::cuda_testing::gpu_required()) ADD_FAILURE() << "DETLLM_REQUIRE_GPU=1 but " << *why;
  return false;
}

namespace {

// The GPU and CPU backends are close, not equal (design.md section 1): on weights already
// rounded to bf16 the GPU still rounds activations to bf16 before each GEMM, so logits agree
// within |Δ| ≤ 0.05 · max|logit| and usually pick the same greedy token.
TEST_P(Conformance, CloseToCpuBackend) {
  if (tp_group_) GTEST_SKIP() << "the group's model is GPU against GPU; TpDegreeIsNotANumerics";
  if (block_type_.starts_with("fp8") || GetParam().find("+kvfp8") != std::string::npos)
    GTEST_SKIP() << "FP8 against the CPU's FP8: CudaFp8Model.*CloseToTheCpuFp8Reference";
  const ModelWeights rounded = kernels::cuda_testing::bf16_rounded_weights(weights_);
  WorkloadSpec s = spec(4);
  s.scoring_share = 0;
  s.max_new_tokens = 1;
  auto reqs = random_workload(12, s);
  for (auto& r : reqs) r.n = 1;
  Target cpu = target_;
  cpu.weights = &rounded;
  cpu.make_ops = [](int n) { return kernels::make_cpu_ops(n); };
  Target gpu = target_;
  gpu.weights = &rounded;
  const RunResult a = run(cpu, exec("cpu"), reqs), b = run(gpu, exec("gpu"), reqs);
  kernels::cuda_testing::expect_logits_close(a, b, reqs.size(), 0.05f);
}

INSTANTIATE_TEST_SUITE_P(Gpu, Conformance,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3",
                                           "tiny-llama#tp2", "tiny-qwen2#tp2", "tiny-qwen3#tp2",
                                           "tiny-qwen3-moe", "tiny-qwen3@fp8", "tiny-llama@fp8",
                                           "tiny-qwen3@fp8g", "tiny-llama@fp8g",
                                           "tiny-qwen3-moe@fp8", "tiny-qwen3-moe@fp8g",
                                           "tiny-llama@fp8+kvfp8", "tiny-qwen3+kvfp8"),
                         suite_param_name);

}  // namespace
}  // namespace detllm::conformance
