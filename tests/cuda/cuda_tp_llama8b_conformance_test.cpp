// The tensor-parallel conformance subset with the tensor-parallel degree as a variation, through the
// engine, on Llama-3.1-8B's layer shapes on the CUDA backend (ranks as threads on one GPU,
// model/tp_group.h): tests/conformance/tp_degree_checks.h — V1, V3, V4 (generated at TP d,
// re-scored at TP 1 — the RL case — and the other way round), V5 and V7, each at TP 2, 4 and 8
// against every request run alone at TP 1 (the CPU runs the same checks on the tiny models:
// tests/conformance/tp_degree_test.cpp). The shapes are the 8B model's (dim 4096, 32 q / 8 KV
// heads of 128, FFN 14336, canonical chunks 8 / 8) with 2 layers and a 4096-token vocabulary,
// so the host weights the ranks slice stay ~1.8 GB.
// Passed on an H200 (2026-12-02; docs/tensor_parallel.md, "CUDA: ranks as threads on one GPU").
// Run: build/tests/test_cuda --gtest_filter='Llama8bTensorParallel*' (skips without a GPU).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "conformance/tp_degree_checks.h"
#include "cuda/cuda_test_util.h"
#include "model/synthetic.h"
#include "model/tp_test_util.h"

namespace detllm::conformance {
namespace {

TEST(Llama8bTensorParallel, EveryDegreeReproducesTp1AcrossV1V3V4V5V7) {
  DETLLM_SKIP_WITHOUT_GPU();
  const ModelConfig config = detllm::testing::llama8b_layer_shapes();
  const auto t0 = std::chrono::steady_clock::now();
  const ModelWeights weights = make_synthetic_weights(config, 8);
  std::printf("[tp-degree] 8B layer shapes: host weights in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  TpDegreeChecks checks(
      config, weights, [] { return kernels::cuda_testing::invariant_ops(); },
      "llama-3.1-8b shapes, 2 layers");
  checks.expect_every_degree_reproduces_tp1({2, 4, 8});
}

}  // namespace
}  // namespace detllm::conformance
