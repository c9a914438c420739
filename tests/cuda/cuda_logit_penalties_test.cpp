// Logit penalties on the GPU (kernels/cuda/logit_penalties.cu through
// CudaOps::apply_logit_penalties) against the host formula (kernels/sampling/logit_penalties.h)
// bit for bit: random rows, histories and parameters (thousands of products f * c, so a
// contracted multiply-add would show), the 128256-token vocabulary, masked logits; and the
// engine on a CUDA model with penalised requests, device sampling against host sampling (the
// host applies the penalties to a downloaded row). Skips without a GPU.
// Run: build-cuda/tests/test_cuda --gtest_filter='*CudaLogitPenalties*'.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "engine/engine_sampling_util.h"
#include "kernels/sampling/logit_penalties.h"
#include "kernels/sampling/sampling_params.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

using kernels::cuda_testing::invariant_ops;

float uniform(std::mt19937& rng, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(rng() >> 8) * 0x1p-24f;
}

SamplingParams random_penalties(std::mt19937& rng, int32_t vocab) {
  SamplingParams p;
  p.presence_penalty = uniform(rng, -2.0f, 2.0f);
  p.frequency_penalty = uniform(rng, -2.0f, 2.0f);
  p.repetition_penalty = uniform(rng, 0.05f, 3.0f);
  for (int32_t t = static_cast<int32_t>(rng() % 50); t < vocab; t += 1 + rng() % 997) {
    p.logit_bias.push_back({t, uniform(rng, -100.0f, 100.0f)});
  }
  p.validate(vocab);
  return p;
}

void check_device_equals_host(int32_t rows, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  for (float& x : logits) {
    const uint32_t kind = rng() % 32;
    x = kind == 0   ? -std::numeric_limits<float>::infinity()
        : kind == 1 ? -0.0f
                    : uniform(rng, -40.0f, 40.0f);
  }
  std::vector<LogitPenalty> entries;
  std::vector<int64_t> scratch;
  for (int32_t r = 0; r < rows; ++r) {
    const SamplingParams p = random_penalties(rng, vocab);
    const int32_t n_prompt = static_cast<int32_t>(rng() % 300);
    const int32_t n_gen = static_cast<int32_t>(rng() % 600);
    const uint32_t range = 1 + rng() % static_cast<uint32_t>(vocab);
    std::vector<int32_t> history;
    for (int32_t i = 0; i < n_prompt + n_gen; ++i) {
      history.push_back(static_cast<int32_t>(rng() % range));
    }
    build_logit_penalties(p, history, n_prompt, r, entries, scratch);
  }
  ASSERT_GT(entries.size(), 100u);
  std::vector<float> want = logits;
  apply_logit_penalties_host(want.data(), rows, vocab, entries);

  auto ops = invariant_ops();
  kernels::Buffer dev(*ops, logits.size() * sizeof(float));
  ops->upload(dev.data(), logits.data(), logits.size() * sizeof(float));
  ops->apply_logit_penalties(dev.f32(), rows, vocab, entries.data(),
                             static_cast<int32_t>(entries.size()));
  std::vector<float> got(logits.size());
  ops->download(got.data(), dev.data(), got.size() * sizeof(float));
  size_t changed = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << "element " << i << " (row " << i / vocab << ", token " << i % vocab << "): device "
        << got[i] << ", host " << want[i];
    changed += std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(logits[i]);
  }
  EXPECT_GT(changed, entries.size() / 2);
}

TEST(CudaLogitPenalties, DeviceEqualsHostSmallVocab) {
  DETLLM_SKIP_WITHOUT_GPU();
  for (uint32_t seed : {1u, 2u, 3u}) check_device_equals_host(7, 1000, seed);
}

TEST(CudaLogitPenalties, DeviceEqualsHostLlama3Vocab) {
  DETLLM_SKIP_WITHOUT_GPU();
  check_device_equals_host(64, 128256, 4);
}

TEST(CudaLogitPenalties, BadEntriesAreRefused) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  kernels::Buffer dev(*ops, 2 * 10 * sizeof(float));
  LogitPenalty e;
  e.row = 2;  // outside 2 rows
  EXPECT_THROW(ops->apply_logit_penalties(dev.f32(), 2, 10, &e, 1), Error);
}

// Engine on a CUDA model: penalised requests (greedy and sampled, n > 1, verified by the
// harness's comparison) give the same bits with device sampling and with host sampling.
TEST(CudaLogitPenalties, EngineDeviceEqualsHost) {
  DETLLM_SKIP_WITHOUT_GPU();
  const ModelConfig cfg = synthetic_config("tiny-llama");
  const ModelWeights w = make_synthetic_weights(cfg, 5);
  auto ops = invariant_ops();
  LlamaModel model(cfg, w, *ops);
  engine::testing::Workload wl = engine::testing::sampling_workload(cfg.vocab_size, true);
  std::mt19937 rng(9);
  for (size_t i = 0; i < wl.requests.size(); ++i) {
    if (wl.requests[i].max_tokens > 0 && i % 3 != 2) {
      SamplingParams p = random_penalties(rng, cfg.vocab_size);
      p.presence_penalty *= 0.5f;
      SamplingParams& s = wl.requests[i].sampling;
      s.presence_penalty = p.presence_penalty;
      s.frequency_penalty = p.frequency_penalty;
      s.repetition_penalty = p.repetition_penalty;
      s.logit_bias = p.logit_bias;
    }
  }
  engine::EngineConfig c;
  c.scheduler.kv.block_size = 4;
  c.kv_cache_tokens = 2048;
  c.scheduler.max_tokens_per_step = 48;
  c.scheduler.chunk_size = 8;
  c.host_sampling = true;
  const auto host = engine::testing::run_workload(model, c, wl);
  c.host_sampling = false;
  const auto device = engine::testing::run_workload(model, c, wl);
  EXPECT_EQ(engine::testing::first_difference(host, device), "");
  EXPECT_GT(device.stats.n_generated_tokens, 40);
}

}  // namespace
}  // namespace detllm
