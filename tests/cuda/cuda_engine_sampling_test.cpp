// The engine sampling on the GPU (Engine → ModelRunner::sample → CudaOps::sample_rows, logits
// left in device memory) against host logits + the CPU sampler (EngineConfig::host_sampling)
// on the same CUDA model: the same tokens, logprobs, top logprobs, prompt logprobs, captured
// logits and finish reasons, bit for bit — on the three tiny synthetic models with CUDA graphs
// (padded decode steps; pad rows are never sampled) and on a one-layer Llama-3.1-8B shape with
// its 128256-token vocabulary. And: without logit consumers no logit row is downloaded.
// CPU counterpart: tests/engine/engine_sampling_test.cpp. Skips without a GPU.
// Run: build-cuda/tests/test_cuda --gtest_filter='*CudaEngineSampling*'.
#include <gtest/gtest.h>

#include <algorithm>

#include "cuda/cuda_test_util.h"
#include "engine/engine_sampling_util.h"
#include "model/synthetic.h"

namespace detllm::engine {
namespace {

using kernels::cuda_testing::invariant_ops;
using testing::count_finish;
using testing::first_difference;
using testing::Outcome;
using testing::run_workload;
using testing::sampling_workload;
using testing::set_stop_ids;
using testing::Workload;

EngineConfig gpu_engine(bool host_sampling) {
  EngineConfig c;
  c.scheduler.kv.block_size = 4;
  c.kv_cache_tokens = 2048;
  c.scheduler.max_tokens_per_step = 48;
  c.scheduler.chunk_size = 8;
  c.host_sampling = host_sampling;  // cuda_graphs: auto = on (CUDA has graphs)
  return c;
}

class CudaEngineSampling : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaEngineSampling, DeviceSamplingEqualsHostSampling) {
  DETLLM_SKIP_WITHOUT_GPU();
  const ModelConfig cfg = synthetic_config(GetParam());
  const ModelWeights w = make_synthetic_weights(cfg, 5);
  auto ops = invariant_ops();
  LlamaModel model(cfg, w, *ops);
  Workload wl = sampling_workload(cfg.vocab_size, /*with_consumers=*/true);
  set_stop_ids(wl, run_workload(model, gpu_engine(true), wl));
  const Outcome host = run_workload(model, gpu_engine(true), wl);
  const Outcome device = run_workload(model, gpu_engine(false), wl);
  EXPECT_EQ(first_difference(host, device), "");
  EXPECT_GE(count_finish(device, FinishReason::kStop), 1) << "no stop id was hit";
  EXPECT_EQ(device.stats.n_rows_sampled_on_backend, device.stats.n_generated_tokens);
  EXPECT_GT(device.n_graph_replays, 0) << "no decode step ran from a CUDA graph";
}

TEST_P(CudaEngineSampling, StepsWithoutLogitConsumersDownloadNoLogits) {
  DETLLM_SKIP_WITHOUT_GPU();
  const ModelConfig cfg = synthetic_config(GetParam());
  const ModelWeights w = make_synthetic_weights(cfg, 6);
  auto ops = invariant_ops();
  LlamaModel model(cfg, w, *ops);
  const Workload wl = sampling_workload(cfg.vocab_size, /*with_consumers=*/false);
  const Outcome host = run_workload(model, gpu_engine(true), wl);
  const Outcome device = run_workload(model, gpu_engine(false), wl);
  EXPECT_EQ(first_difference(host, device), "");
  // Evidence without timing: every logit download goes through LlamaModel::download_logits.
  EXPECT_EQ(device.model_rows_downloaded, 0);
  EXPECT_EQ(device.stats.n_logit_rows_downloaded, 0);
  EXPECT_EQ(device.stats.n_rows_sampled_on_backend, device.stats.n_generated_tokens);
  EXPECT_GT(device.n_graph_replays, 0);
  EXPECT_GT(host.model_rows_downloaded, 0);
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaEngineSampling,
                         ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Llama-3.1-8B shapes with one layer (weights generated on the device): the real vocabulary,
// so the device sampler's radix selects run over 128256 logits per row.
TEST(CudaEngineSamplingLlama8b, DeviceSamplingEqualsHostSamplingAtFullVocab) {
  DETLLM_SKIP_WITHOUT_GPU();
  ModelConfig cfg = synthetic_config("llama-3.1-8b");
  cfg.n_layers = 1;
  auto ops = invariant_ops();
  const LlamaModel model(cfg, synthetic_recipe(cfg, 7), *ops);
  EngineConfig host_cfg = gpu_engine(true);
  host_cfg.scheduler.kv.block_size = 16;
  EngineConfig device_cfg = host_cfg;
  device_cfg.host_sampling = false;
  Workload wl = sampling_workload(cfg.vocab_size, /*with_consumers=*/true);
  set_stop_ids(wl, run_workload(model, host_cfg, wl));
  const Outcome host = run_workload(model, host_cfg, wl);
  const Outcome device = run_workload(model, device_cfg, wl);
  EXPECT_EQ(first_difference(host, device), "");
  EXPECT_EQ(device.stats.n_rows_sampled_on_backend, device.stats.n_generated_tokens);
  EXPECT_GT(device.n_graph_replays, 0);
}

}  // namespace
}  // namespace detllm::engine
