// The tensor-parallel degree as a variation of V1, V3, V4, V5 and V7 through the engine
// (tp_degree_checks.h), CPU ranks: tiny-llama (4 q / 2 KV heads) at TP 2 and 4 (at 4 the KV
// heads replicated), tiny-qwen2 (q/k/v biases) and tiny-qwen3 (q/k norm) at TP 2. The CUDA
// form runs the same checks on the 8B layer shapes
// (tests/cuda/cuda_tp_llama8b_conformance_test.cpp). Run: build/tests/test_conformance
// --gtest_filter='TpDegree*'
#include "conformance/tp_degree_checks.h"

#include "kernels/ops.h"
#include "model/synthetic.h"

namespace detllm::conformance {
namespace {

void expect_model(const std::string& name, const std::vector<int32_t>& degrees) {
  const ModelConfig config = synthetic_config(name);
  const ModelWeights weights = make_synthetic_weights(config, 8);
  TpDegreeChecks checks(
      config, weights, [] { return kernels::make_cpu_ops(1); }, name);
  checks.expect_every_degree_reproduces_tp1(degrees);
}

TEST(TpDegree, TinyLlamaAtTp2And4ReproducesTp1) {
  expect_model("tiny-llama", {2, 4});
}
TEST(TpDegree, TinyQwen2AtTp2ReproducesTp1) {
  expect_model("tiny-qwen2", {2});
}
TEST(TpDegree, TinyQwen3AtTp2ReproducesTp1) {
  expect_model("tiny-qwen3", {2});
}

}  // namespace
}  // namespace detllm::conformance
