// FP8 checkpoints as they are published (tests/data/fp8, scripts/ref/fp8_checkpoints.py:
// compressed-tensors per channel, per tensor with a static input scale, 128×128 blocks with
// per-token activations, fbgemm_fp8, transformers' fp8 — dense Qwen3 and Qwen3-MoE with FP8
// experts — a compressed-tensors Qwen3-MoE, and two that store FP8 KV scales, per tensor and
// per KV head, run with the FP8 KV cache) on the CUDA backend: each loads and runs on the
// GPU's FP8 linears (per channel, the block form, FP8 experts), and its logits at every position
// of the reference sequences are close to transformers' forward with the FP8 arithmetic
// emulated in fp32 (logits.f32; the CPU backend matches it within 1e-5, fp8_checkpoint_test.cpp).
// A tolerance, stated: the GPU quantizes the bf16 GEMM inputs and sums in the wgmma kernel's
// blocks, so each row is held within kFp8LogitTolerance · max|logit| of the reference
// (cuda_test_util.h says why); teacher-forced, so both sides see the same tokens. The worst
// ratio per checkpoint is printed (per channel: 0.013 on an H100). And the weights dequantized to bf16 on the same device give
// other logits (FP8 ran).
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaFp8Checkpoint*' (skips without a GPU).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cuda/cuda_test_util.h"
#include "model/checkpoint_test_util.h"
#include "model/fp8_weights.h"
#include "model/llama_model.h"
#include "model/model_loader.h"
#include "model/solo_runner.h"

namespace detllm {
namespace {

namespace fs = std::filesystem;
using checkpoint_testing::read_f32;
using checkpoint_testing::read_json;

const fs::path kData = fs::path(DETLLM_SOURCE_DIR) / "tests" / "data" / "fp8";

std::vector<float> gpu_logits(const LlamaModel& m, const std::vector<int32_t>& ids) {
  SoloRunner runner(m, static_cast<int32_t>(ids.size()) + 1);
  return runner.feed(ids, /*all_logits=*/true);
}

TEST(CudaFp8Checkpoint, PublishedLayoutsAreCloseToTransformersFp8Arithmetic) {
  DETLLM_SKIP_WITHOUT_GPU();
  for (const char* c : {"ct_channel", "ct_static", "ct_block", "fbgemm", "fp8_dense", "fp8_moe",
                        "ct_moe", "ct_kv", "ct_kv_head"}) {
    SCOPED_TRACE(c);
    const fs::path dir = kData / c;
    const nlohmann::json g = read_json(dir / "golden.json");
    const std::vector<float> ref = read_f32(dir / "logits.f32");
    const auto model = load_model(dir.string());
    // A checkpoint with FP8 KV scales (kv_cache_scheme) runs the FP8 KV cache with them, as its
    // reference rounds K and V by them.
    const bool kv = model->config.fp8.kv_scales != Fp8Config::KvScales::kNone;
    auto ops = kv ? kernels::cuda_testing::invariant_ops(-1, DType::kF8E4M3)
                  : kernels::cuda_testing::invariant_ops();
    const LlamaModel m(model->config, model->weights, *ops);
    ASSERT_TRUE(m.fp8_projections());
    // The same weights dequantized (bf16 on the device): another arithmetic, other logits.
    ModelWeights wide = model->weights;
    dequantize_weights(wide);
    const LlamaModel plain(model->config, wide, *ops);
    const size_t vocab = static_cast<size_t>(model->config.vocab_size);
    size_t offset = 0;
    float worst = 0;
    bool differ = false;
    for (const auto& s : g["sequences"]) {
      const auto ids = s["tokens"].get<std::vector<int32_t>>();
      const std::vector<float> ours = gpu_logits(m, ids);
      const std::vector<float> other = gpu_logits(plain, ids);
      ASSERT_LE(offset + ours.size(), ref.size());
      differ = differ || std::memcmp(ours.data(), other.data(), ours.size() * 4) != 0;
      for (size_t row = 0; row < ours.size() / vocab; ++row) {
        float max_ref = 0, max_diff = 0;
        for (size_t t = 0; t < vocab; ++t) {
          const float theirs = ref[offset + row * vocab + t];
          max_ref = std::max(max_ref, std::fabs(theirs));
          max_diff = std::max(max_diff, std::fabs(ours[row * vocab + t] - theirs));
        }
        const float ratio = max_ref > 0 ? max_diff / max_ref : max_diff;
        worst = std::max(worst, ratio);
        EXPECT_LE(ratio, kernels::cuda_testing::kFp8LogitTolerance) << "position " << row;
      }
      offset += ours.size();
    }
    EXPECT_EQ(offset, ref.size());
    EXPECT_TRUE(differ) << "the FP8 checkpoint gave its dequantized weights' logits";
    std::printf("[fp8 checkpoint] %s (%s): CUDA vs transformers' FP8 arithmetic, worst max|Δ| / "
                "max|logit| = %.3g\n",
                c, fp8_class_name(model->weights).c_str(), worst);
  }
}

}  // namespace
}  // namespace detllm
