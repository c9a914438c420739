// The forward pass against Hugging Face transformers (fp32, same GGUF weights): logits within
// a stated tolerance at every prompt position, and identical greedy tokens over 40 steps; the
// q8-activation numerics class within its own, much wider, stated tolerance.
// Golden file: tests/data/golden/smollm2_logits.json, made by scripts/ref/golden_logits.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "kernels/ops.h"
#include "model/model_loader.h"
#include "model/solo_runner.h"

namespace detllm {
namespace {

// Tolerance: both sides compute in fp32 but reduce in different orders (SIMD lanes here,
// BLAS tiles there) through 30 layers; |ours - theirs| <= kAbsTol + kRelTol * |theirs|. The
// worst difference measured over the 5,568 compared logits is 9.63e-5 (2026-12-01, 2 threads;
// the test prints it); the bound is ~3x that. (It was 2e-3 + 1e-3 |theirs|, ~20x looser.)
// Whole vocabulary rows are compared on the transformers >= 5 checkpoints
// (hf_checkpoint_test.cpp): this golden file cannot be remade on the GPU machine, where the
// 98 MB model file does not fit the 64 MiB transfer limit.
constexpr float kAbsTol = 3e-4f;
constexpr float kRelTol = 0.0f;

// The q8-activation numerics class (CpuActivations::kQ8, kernels/ref/q8_act_ref.h) rounds every
// Q4_1/Q8_0 matmul's input to 8 bits per 32-block, as llama.cpp does: a far larger, stated
// tolerance. Measured 2026-12-01 over the 5,568 golden logits: worst 1.3, mean 0.186, with
// |logits| up to 41.5; the bound is 2x the worst. Its greedy tokens part from transformers'
// after 2-40 tokens (63 of the 200 before the first difference): counted, not required equal.
constexpr float kQ8AbsTol = 2.6f;

class GoldenLogits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = find_default_model();
    if (path.empty()) return;
    model_ = load_model(path).release();
    ops_ = kernels::make_cpu_ops(2).release();
    llama_ = new LlamaModel(model_->config, model_->weights, *ops_);
    q8_ops_ = kernels::make_cpu_ops(2, kernels::CpuActivations::kQ8).release();
    q8_llama_ = new LlamaModel(model_->config, model_->weights, *q8_ops_);
    std::ifstream in(std::string(DETLLM_SOURCE_DIR) + "/tests/data/golden/smollm2_logits.json");
    golden_ = new nlohmann::json(nlohmann::json::parse(in));
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "default model not installed: run scripts/setup.sh";
  }
  static inline LoadedModel* model_ = nullptr;
  static inline kernels::Ops* ops_ = nullptr;
  static inline LlamaModel* llama_ = nullptr;
  static inline kernels::Ops* q8_ops_ = nullptr;
  static inline LlamaModel* q8_llama_ = nullptr;
  static inline nlohmann::json* golden_ = nullptr;

  // The worst |ours - transformers| over every golden logit, asserting each <= tol.
  static float worst_prompt_difference(const LlamaModel& llama, float tol) {
    float worst = 0, largest = 0;
    double total = 0;
    size_t compared = 0;
    for (const auto& c : (*golden_)["cases"]) {
      const auto tokens = c["tokens"].get<std::vector<int32_t>>();
      SoloRunner runner(llama, 256);
      const std::vector<float> logits = runner.feed(tokens, /*all_logits=*/true);
      const int32_t vocab = model_->config.vocab_size;
      for (size_t p = 0; p < tokens.size(); ++p) {
        const auto& pos = c["positions"][p];
        const auto ids = pos["ids"].get<std::vector<int32_t>>();
        const auto ref = pos["logits"].get<std::vector<float>>();
        for (size_t i = 0; i < ids.size(); ++i) {
          const float diff = std::fabs(logits[p * vocab + ids[i]] - ref[i]);
          worst = std::max(worst, diff);
          largest = std::max(largest, std::fabs(ref[i]));
          total += diff;
          ++compared;
          EXPECT_LE(diff, tol) << c["text"] << " position " << p << " token " << ids[i];
        }
      }
    }
    EXPECT_GT(compared, 0u) << "no logits compared";
    std::printf("|ours - transformers| logit difference: worst %.3g, mean %.3g over %zu logits "
                "(largest |logit| %.3g)\n", worst, compared ? total / compared : 0.0, compared,
                largest);
    return worst;
  }

  // Greedy continuation of every golden case (as many tokens as the golden file has).
  static std::vector<std::vector<int32_t>> greedy(const LlamaModel& llama) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& c : (*golden_)["cases"]) {
      const auto tokens = c["tokens"].get<std::vector<int32_t>>();
      const size_t n = c["greedy"].size();
      SoloRunner runner(llama, 256);
      std::vector<float> logits = runner.feed(tokens);
      std::vector<int32_t> got;
      for (size_t step = 0; step < n; ++step) {
        const int32_t next = static_cast<int32_t>(
            std::max_element(logits.begin(), logits.end()) - logits.begin());
        got.push_back(next);
        logits = runner.feed(std::span<const int32_t>(&next, 1));
      }
      out.push_back(got);
    }
    return out;
  }
};

TEST_F(GoldenLogits, GoldenFileHasCases) {
  // An empty golden file would make every other test here pass without comparing anything.
  ASSERT_TRUE(golden_->contains("cases"));
  EXPECT_EQ((*golden_)["cases"].size(), 5u);
  for (const auto& c : (*golden_)["cases"]) {
    EXPECT_FALSE(c["tokens"].empty());
    EXPECT_EQ(c["positions"].size(), c["tokens"].size());
    EXPECT_FALSE(c["greedy"].empty());
  }
}

TEST_F(GoldenLogits, PromptLogitsMatchTransformers) {
  float worst = 0;
  size_t compared = 0;
  for (const auto& c : (*golden_)["cases"]) {
    const auto tokens = c["tokens"].get<std::vector<int32_t>>();
    SoloRunner runner(*llama_, 256);
    const std::vector<float> logits = runner.feed(tokens, /*all_logits=*/true);
    const int32_t vocab = model_->config.vocab_size;
    for (size_t p = 0; p < tokens.size(); ++p) {
      const auto& pos = c["positions"][p];
      const auto ids = pos["ids"].get<std::vector<int32_t>>();
      const auto ref = pos["logits"].get<std::vector<float>>();
      for (size_t i = 0; i < ids.size(); ++i) {
        const float ours = logits[p * vocab + ids[i]];
        const float diff = std::fabs(ours - ref[i]);
        worst = std::max(worst, diff);
        ++compared;
        ASSERT_LE(diff, kAbsTol + kRelTol * std::fabs(ref[i]))
            << c["text"] << " position " << p << " token " << ids[i];
      }
    }
  }
  ASSERT_GT(compared, 0u) << "no logits compared";
  std::printf("worst |ours - transformers| logit difference: %.3g over %zu logits\n", worst,
              compared);
}

TEST_F(GoldenLogits, GreedyTokensMatchTransformers) {
  for (const auto& c : (*golden_)["cases"]) {
    const auto tokens = c["tokens"].get<std::vector<int32_t>>();
    const auto expected = c["greedy"].get<std::vector<int32_t>>();
    SoloRunner runner(*llama_, 256);
    std::vector<float> logits = runner.feed(tokens);
    std::vector<int32_t> got;
    for (size_t step = 0; step < expected.size(); ++step) {
      const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
      got.push_back(static_cast<int32_t>(best));
      const int32_t next = static_cast<int32_t>(best);
      logits = runner.feed(std::span<const int32_t>(&next, 1));
    }
    EXPECT_EQ(got, expected) << c["text"];
  }
}

TEST_F(GoldenLogits, Q8ActivationsPromptLogitsWithinStatedTolerance) {
  const float worst = worst_prompt_difference(*q8_llama_, kQ8AbsTol);
  // The class is really in use: fp32 activations are within 3e-4 (above).
  EXPECT_GT(worst, kAbsTol) << "q8 activations as close as fp32 ones: not the q8 class?";
}

// Greedy tokens in the q8 class against transformers': how many of each case's leading tokens
// agree (printed). Rounding the activations flips near-ties, after which the texts part;
// measured 2, 5, 6, 10 and 40 of 40. Required: the first 2 of every case and 50 of the 200
// (a check that the class still approximates the model, with a margin, not a bit claim).
TEST_F(GoldenLogits, Q8ActivationsGreedyTokensAgreeAtFirst) {
  const auto got = greedy(*q8_llama_);
  size_t i = 0, total = 0, agreeing = 0;
  for (const auto& c : (*golden_)["cases"]) {
    const auto expected = c["greedy"].get<std::vector<int32_t>>();
    size_t lead = 0;
    while (lead < expected.size() && got[i][lead] == expected[lead]) ++lead;
    std::printf("q8 greedy: %zu of %zu leading tokens agree (%s)\n", lead, expected.size(),
                c["text"].get<std::string>().substr(0, 40).c_str());
    EXPECT_GE(lead, std::min<size_t>(2, expected.size())) << c["text"];
    total += expected.size();
    agreeing += lead;
    ++i;
  }
  std::printf("q8 greedy: %zu of %zu tokens before the first difference\n", agreeing, total);
  EXPECT_GE(agreeing, total / 4);
}

}  // namespace
}  // namespace detllm
