// The conformance suite (conformance_suite.h) on the CPU backend, plus V11 (thread count),
// which only the CPU has. V8 runs as batch padding (the CPU has no graphs).
// The "+q8" parameters run it in the q8-activation numerics class (CpuActivations::kQ8:
// activations rounded to int8 per block before every Q4_0/Q4_1/Q8_0 matmul); "@fp8" on FP8
// weights (per-channel, activations rounded per token; on tiny-qwen3-moe the experts too),
// "@fp8g" on FP8 weights in 128x128 blocks with activations per token and 128 columns
// (transformers' fp8 format), "+kvfp8" with the FP8 KV cache
// (--kv-dtype fp8: K/V rounded to E4M3 on append, scales fixed at load).
// Negative controls: DETLLM_CONFORMANCE_FAULT=<fault> (fault_ops.h) runs the whole suite, the
// real-model tests of this binary included, on a backend with that fault planted — the suite
// must then fail (README lists which tests each fault fails). Unset: the CPU backend.
#include <cstdlib>
#include <string_view>

#include "conformance/conformance_suite.h"
#include "conformance/fault_ops.h"

namespace detllm::conformance {

std::unique_ptr<kernels::Ops> suite_make_ops(int n_threads) {
  const char* fault = std::getenv("DETLLM_CONFORMANCE_FAULT");
  if (fault != nullptr && *fault != '\0') return make_fault_ops(fault, n_threads);
  // The running test's parameter names the numerics class ("tiny-llama@q4_1+q8").
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string_view param =
      info != nullptr && info->value_param() != nullptr ? info->value_param() : "";
  const bool q8 = param.find("+q8") != std::string_view::npos;
  const bool kv_fp8 = param.find("+kvfp8") != std::string_view::npos;  // --kv-dtype fp8
  return kernels::make_cpu_ops(
      n_threads, q8 ? kernels::CpuActivations::kQ8 : kernels::CpuActivations::kF32, kv_fp8);
}
bool suite_backend_available(std::string*) { return true; }

namespace {

// V11: number of CPU threads.
TEST_P(Conformance, V11_Threads) {
  auto reqs = random_workload(12, spec(6));
  Execution one = exec("1 thread", 1);
  const RunResult ref = run(target_, one, reqs);
  for (int threads : {2, 3}) {
    Execution e = exec("threads", threads);
    expect_same(reqs, ref.traces, run(target_, e, reqs),
                std::to_string(threads) + " threads");
  }
}

// The "+q8" parameters really run the q8 class (else they would repeat the fp32 runs).
TEST_P(Conformance, NumericsClassOfTheParameter) {
  if (std::getenv("DETLLM_CONFORMANCE_FAULT") != nullptr) GTEST_SKIP() << "fault backend";
  const bool q8 = GetParam().find("+q8") != std::string::npos;
  EXPECT_EQ(target_.make_ops(1)->name(), q8 ? "cpu-q8" : "cpu");
  EXPECT_EQ(target_.make_ops(1)->kv_fp8(), GetParam().find("+kvfp8") != std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Cpu, Conformance,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3",
                                           "tiny-llama@q4_1", "tiny-qwen2@q8_0", "tiny-qwen3@q4_0",
                                           "tiny-llama@q4_1+q8", "tiny-qwen2@q8_0+q8",
                                           "tiny-qwen3@q4_0+q8", "tiny-llama#tp2", "tiny-qwen2#tp2",
                                           "tiny-qwen3#tp2", "tiny-qwen3-moe",
                                           "tiny-qwen3-moe@q8_0", "tiny-qwen3@fp8",
                                           "tiny-llama@fp8+kvfp8", "tiny-qwen3-moe@fp8",
                                           "tiny-qwen3-moe@fp8g"),
                         suite_param_name);

}  // namespace
}  // namespace detllm::conformance
