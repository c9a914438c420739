// The Engine's request lifecycle on a synthetic tiny model: stop rules, abort (frees KV),
// n samples sharing the prompt's blocks, scoring, status, and request validation errors.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/engine.h"
#include "model/synthetic.h"

namespace detllm::engine {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = synthetic_config("tiny-llama");
    weights_ = make_synthetic_weights(config_, 3);
    ops_ = kernels::make_cpu_ops(2);
    model_ = std::make_unique<LlamaModel>(config_, weights_, *ops_);
    EngineConfig c;
    c.scheduler.kv.block_size = 4;
    c.kv_cache_tokens = 512;
    engine_ = std::make_unique<Engine>(*model_, c);
  }
  Request request(int n_prompt, int max_tokens) {
    Request r;
    for (int i = 0; i < n_prompt; ++i) r.prompt.push_back((i * 37 + 5) % config_.vocab_size);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    return r;
  }
  void expect_no_kv_in_use() {
    engine_->scheduler().check_consistency();
    EXPECT_EQ(engine_->scheduler().kv_cache().stats().n_referenced, 0);
  }
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<kernels::Ops> ops_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineTest, MaxTokensFinishesWithLength) {
  std::vector<int32_t> toks;
  FinishReason reason = FinishReason::kNone;
  Usage usage;
  RequestCallbacks cb;
  cb.on_token = [&](const TokenEvent& e) { toks.push_back(e.token); };
  cb.on_finish = [&](int32_t, FinishReason r, const Usage& u) { reason = r, usage = u; };
  engine_->add_request(request(9, 5), cb);
  engine_->run_until_idle();
  EXPECT_EQ(toks.size(), 5u);
  EXPECT_EQ(reason, FinishReason::kLength);
  EXPECT_EQ(usage.prompt_tokens, 9);
  EXPECT_EQ(usage.completion_tokens, 5);
  expect_no_kv_in_use();
}

TEST_F(EngineTest, StopTokenIdFinishesWithStop) {
  std::vector<int32_t> first;
  RequestCallbacks cb;
  cb.on_token = [&](const TokenEvent& e) { first.push_back(e.token); };
  engine_->add_request(request(6, 8), cb);
  engine_->run_until_idle();
  ASSERT_GE(first.size(), 3u);
  Request r = request(6, 8);
  r.stop_token_ids = {first[2]};
  std::vector<int32_t> got;
  FinishReason reason = FinishReason::kNone;
  cb.on_token = [&](const TokenEvent& e) { got.push_back(e.token); };
  cb.on_finish = [&](int32_t, FinishReason rr, const Usage&) { reason = rr; };
  engine_->add_request(r, cb);
  engine_->run_until_idle();
  const size_t stop_at = std::find(first.begin(), first.end(), first[2]) - first.begin();
  EXPECT_EQ(got.size(), stop_at + 1);
  EXPECT_EQ(reason, FinishReason::kStop);
}

TEST_F(EngineTest, AbortFreesKvAndReportsAbort) {
  FinishReason reason = FinishReason::kNone;
  RequestCallbacks cb;
  cb.on_finish = [&](int32_t, FinishReason r, const Usage&) { reason = r; };
  const RequestId id = engine_->add_request(request(20, 50), cb);
  engine_->step();
  engine_->step();
  EXPECT_EQ(engine_->status(id).state, RequestStatus::State::kRunning);
  engine_->abort(id);
  EXPECT_EQ(reason, FinishReason::kAbort);
  EXPECT_EQ(engine_->status(id).state, RequestStatus::State::kUnknown);
  EXPECT_FALSE(engine_->has_work());
  expect_no_kv_in_use();
}

TEST_F(EngineTest, NSamplesUseSeparateStreamsAndShareThePrompt) {
  Request r = request(10, 6);
  r.n = 3;
  r.sampling.temperature = 1.5f;
  r.sampling.seed = 11;
  std::vector<std::vector<int32_t>> toks(3);
  RequestCallbacks cb;
  cb.on_token = [&](const TokenEvent& e) { toks[e.sample_index].push_back(e.token); };
  const int64_t computed_before = engine_->stats().n_computed_tokens;
  engine_->add_request(r, cb);
  engine_->run_until_idle();
  for (const auto& t : toks) EXPECT_EQ(t.size(), 6u);
  EXPECT_TRUE(toks[0] != toks[1] || toks[1] != toks[2]) << "three identical streams";
  // The prompt is computed once (10 tokens), then each sample decodes its 5 further tokens.
  EXPECT_EQ(engine_->stats().n_computed_tokens - computed_before, 10 + 3 * 5);
  expect_no_kv_in_use();
}

TEST_F(EngineTest, ScoringReturnsEveryPromptLogprob) {
  Request r = request(12, 0);
  r.prompt_logprobs = 2;
  std::vector<PromptLogprob> lps;
  RequestCallbacks cb;
  cb.on_prompt_logprobs = [&](std::span<const PromptLogprob> p) { lps.assign(p.begin(), p.end()); };
  engine_->add_request(r, cb);
  engine_->run_until_idle();
  ASSERT_EQ(lps.size(), 11u);
  for (size_t i = 0; i < lps.size(); ++i) {
    EXPECT_EQ(lps[i].position, static_cast<int32_t>(i + 1));
    EXPECT_EQ(lps[i].token, r.prompt[i + 1]);
    EXPECT_LE(lps[i].logprob, 0.0f);
    EXPECT_EQ(lps[i].top_logprobs.size(), 2u);
  }
  expect_no_kv_in_use();
}

TEST_F(EngineTest, InvalidRequestsAreRefusedWithClearErrors) {
  auto expect_error = [&](Request r, const std::string& needle) {
    try {
      engine_->add_request(std::move(r), {});
      FAIL() << "accepted a request that should fail with: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(request(0, 4), "empty");
  Request bad_token = request(3, 4);
  bad_token.prompt[1] = config_.vocab_size;
  expect_error(bad_token, "outside the vocabulary");
  expect_error(request(2000, 100), "exceed the context");
  Request bad_temp = request(3, 4);
  bad_temp.sampling.temperature = -1;
  expect_error(bad_temp, "temperature");
  Request stop_strings = request(3, 4);
  stop_strings.stop = {"x"};
  expect_error(stop_strings, "tokenizer");
  EXPECT_FALSE(engine_->has_work());
}

}  // namespace
}  // namespace detllm::engine
