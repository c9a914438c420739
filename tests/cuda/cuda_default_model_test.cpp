// The real default model on the GPU: the shared real-model conformance tests
// (tests/conformance/default_model_suite.h: V1, V3, V4, V6, V7 bit for bit) with the CUDA backend
// of this binary (suite_make_ops in cuda_conformance_test.cpp), and its logits close to the CPU
// backend's. Needs the model file: scripts/setup.sh installs it, DETLLM_DEFAULT_MODEL can point
// at a copy (the GPU report script does). Run: build-cuda/tests/test_cuda
// --gtest_filter='DefaultModel*:CudaDefaultModel*' (skips without a GPU or the model).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/dtype.h"

#include "conformance/default_model_suite.h"
#include "cuda/cuda_test_util.h"

namespace detllm::conformance {
namespace {

// Close, not equal (design.md section 1): the GPU keeps weights in bf16 and rounds activations
// to bf16 before each GEMM (30 layers here); on weights rounded to bf16 for both backends the
// logits of the real model agree within |Δ| ≤ 0.15 · max|logit| (measured on the H200:
// worst 0.094 over the workload's positions; the tiny models stay under 0.05).
TEST_F(DefaultModelConformance, CudaCloseToCpuBackend) {
  const ModelWeights rounded = kernels::cuda_testing::bf16_rounded_weights(model_->weights);
  auto reqs = workload();
  for (auto& r : reqs) r.max_tokens = 1;
  Target cpu = target_, gpu = target_;
  cpu.weights = gpu.weights = &rounded;
  cpu.make_ops = [](int n) { return kernels::make_cpu_ops(n); };
  const RunResult a = run(cpu, exec("cpu"), reqs), b = run(gpu, exec("gpu"), reqs);
  const float worst = kernels::cuda_testing::expect_logits_close(a, b, reqs.size(), 0.15f);
  std::printf("[real model] worst |logit gpu - cpu| / max|logit| = %.4g\n", worst);
}

}  // namespace
}  // namespace detllm::conformance
