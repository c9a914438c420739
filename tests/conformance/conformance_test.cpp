// The conformance suite (conformance_suite.h) on the CPU backend, plus V11 (thread count),
// which only the CPU has. V8 runs as batch padding (the CPU has no graphs).
// Negative controls: DETLLM_CONFORMANCE_FAULT=<fault> (fault_ops.h) runs the whole suite, the
// real-model tests of this binary included, on a backend with that fault planted — the suite
// must then fail (README lists which tests each fault fails). Unset: the CPU backend.
#include <cstdlib>

#include "conformance/conformance_suite.h"
#include "conformance/fault_ops.h"

namespace detllm::conformance {

std::unique_ptr<kernels::Ops> suite_make_ops(int n_threads) {
  const char* fault = std::getenv("DETLLM_CONFORMANCE_FAULT");
  if (fault != nullptr && *fault != '\0') return make_fault_ops(fault, n_threads);
  return kernels::make_cpu_ops(n_threads);
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

INSTANTIATE_TEST_SUITE_P(Cpu, Conformance,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3",
                                           "tiny-llama@q4_1", "tiny-qwen2@q8_0",
                                           "tiny-qwen3@q4_0"),
                         suite_param_name);

}  // namespace
}  // namespace detllm::conformance
