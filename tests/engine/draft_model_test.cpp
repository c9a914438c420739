// Speculative decoding with the draft-model drafter (engine/draft_model_drafter.h) and the
// adaptive draft length (engine/draft_policy.h) on synthetic tiny models: the target as its
// own drafter accepts every greedy draft, a draft model of other weights changes no token,
// a stop string on an accepted draft, an abort in the middle of a window, n = 2, the off-switch,
// the refusals by name, and the policy's rule. Bit equality across models and executions
// (logits too, preemption) is the conformance suite's (tests/conformance/speculation_checks.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/draft_policy.h"
#include "engine/engine.h"
#include "engine/speculation_test_util.h"
#include "model/synthetic.h"
#include "tokenizer/tokenizer.h"

namespace detllm::engine {
namespace {

struct Output {
  std::vector<std::vector<int32_t>> tokens;  // (n samples)
  std::vector<std::vector<float>> logprobs;
  size_t n_steps = 0;
  FinishReason finish = FinishReason::kNone;
  EngineStats stats;
};

class DraftModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = synthetic_config("tiny-llama");
    weights_ = make_synthetic_weights(config_, 3);
    other_weights_ = make_synthetic_weights(config_, 4);
    ops_ = kernels::make_cpu_ops(2);
    model_ = std::make_unique<LlamaModel>(config_, weights_, *ops_);
    other_ = std::make_unique<LlamaModel>(config_, other_weights_, *ops_);
  }
  static EngineConfig engine_config(int32_t k, bool adaptive = false) {
    EngineConfig c;
    c.scheduler.kv.block_size = 4;
    c.kv_cache_tokens = 512;
    if (k > 0) {
      c.speculative.method = SpeculativeMethod::kDraftModel;
      c.speculative.num_speculative_tokens = k;
      c.speculative.adaptive = adaptive;
    }
    return c;
  }
  static Request request(int32_t max_tokens) {
    Request r;
    const int32_t prompt[] = {11, 57, 203, 9, 140, 3, 88, 17};
    r.prompt.assign(std::begin(prompt), std::end(prompt));
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    return r;
  }
  Output run(const EngineConfig& c, const Request& r, const LlamaModel* draft,
             const Tokenizer* tokenizer = nullptr) {
    Engine engine(*model_, c, tokenizer, c.speculative.enabled() ? draft : nullptr);
    Output out;
    out.tokens.resize(static_cast<size_t>(r.n));
    out.logprobs.resize(static_cast<size_t>(r.n));
    RequestCallbacks cb;
    cb.on_token = [&](const TokenEvent& e) {
      out.tokens[static_cast<size_t>(e.sample_index)].push_back(e.token);
      out.logprobs[static_cast<size_t>(e.sample_index)].push_back(e.logprob);
    };
    cb.on_finish = [&](int32_t, FinishReason reason, const Usage&) { out.finish = reason; };
    engine.add_request(r, cb);
    while (engine.step()) {
      ++out.n_steps;
      engine.scheduler().check_consistency();
    }
    EXPECT_EQ(engine.scheduler().kv_cache().stats().n_referenced, 0);
    out.stats = engine.stats();
    return out;
  }
  static void expect_same(const Output& a, const Output& b) {
    EXPECT_EQ(a.tokens, b.tokens);
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    for (size_t i = 0; i < a.logprobs.size(); ++i) {
      ASSERT_EQ(a.logprobs[i].size(), b.logprobs[i].size());
      EXPECT_EQ(0,
                std::memcmp(a.logprobs[i].data(), b.logprobs[i].data(), a.logprobs[i].size() * 4));
    }
    EXPECT_EQ(a.finish, b.finish);
  }
  ModelConfig config_;
  ModelWeights weights_;
  ModelWeights other_weights_;
  std::unique_ptr<kernels::Ops> ops_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<LlamaModel> other_;
};

// The target as its own greedy drafter: every draft of a greedy request is accepted, K + 1
// tokens a step, the same tokens and logprobs as plain decoding.
TEST_F(DraftModelTest, TargetAsItsOwnDrafterAcceptsEveryGreedyDraft) {
  const Request r = request(30);
  const Output plain = run(engine_config(0), r, nullptr);
  const Output spec = run(engine_config(4), r, model_.get());
  expect_same(plain, spec);
  EXPECT_GT(spec.stats.n_draft_tokens, 0);
  EXPECT_EQ(spec.stats.n_accepted_draft_tokens, spec.stats.n_draft_tokens);
  EXPECT_GT(spec.stats.n_drafter_forwards, 0);
  EXPECT_LT(spec.n_steps, plain.n_steps);
}

// A draft model of other weights (same vocabulary): its drafts change no token, greedy or
// seeded, with one sample or two.
TEST_F(DraftModelTest, OtherDraftModelChangesNoToken) {
  for (int32_t n : {1, 2}) {
    for (float temperature : {0.0f, 0.8f}) {
      Request r = request(24);
      r.n = n;
      r.sampling.temperature = temperature;
      r.sampling.seed = 1234;
      SCOPED_TRACE("n " + std::to_string(n) + ", temperature " + std::to_string(temperature));
      const Output plain = run(engine_config(0), r, nullptr);
      const Output spec = run(engine_config(3), r, other_.get());
      expect_same(plain, spec);
      EXPECT_GT(spec.stats.n_draft_tokens, 0);
      const Output self = run(engine_config(3), r, model_.get());
      expect_same(plain, self);
    }
  }
}

// A stop string completed by an accepted draft in the middle of a window ends the request
// there, as plain decoding does; the window's later drafts and draws are discarded.
TEST_F(DraftModelTest, StopStringOnAnAcceptedDraft) {
  // A word-level tokenizer over the model's vocabulary: token i is "t<i>".
  std::string json = R"({"model": {"type": "BPE", "merges": [], "vocab": {)";
  for (int32_t i = 0; i < config_.vocab_size; ++i) {
    json += (i ? ", " : "") + ("\"t" + std::to_string(i) + "\": ") + std::to_string(i);
  }
  json += "}}}";
  const auto tok = Tokenizer::from_json_string(json, "words.json");
  const Request r = request(30);
  const Output plain = run(engine_config(0), r, nullptr, tok.get());
  // Token 0 comes from the prompt's row; with K = 4 and every draft accepted, the next step
  // emits tokens 1…4 as accepted drafts and 5 as its draw. The text of tokens 0…3 first
  // occurs when token 3 (an accepted draft, not the window's last) is emitted.
  const std::span<const int32_t> out(plain.tokens[0]);
  ASSERT_GE(out.size(), 6u);
  Request stopping = r;
  stopping.stop = {tok->decode(out.first(4))};
  const Output plain_stop = run(engine_config(0), stopping, nullptr, tok.get());
  const Output spec_stop = run(engine_config(4), stopping, model_.get(), tok.get());
  expect_same(plain_stop, spec_stop);
  EXPECT_EQ(spec_stop.finish, FinishReason::kStop);
  EXPECT_EQ(spec_stop.tokens[0].size(), 4u) << "stop '" << stopping.stop[0] << "'";
  // One window of 4 drafts, ended by its third accepted draft.
  EXPECT_EQ(spec_stop.stats.n_draft_tokens, 4);
  EXPECT_EQ(spec_stop.stats.n_accepted_draft_tokens, 3);
}

// Chunks of 2 rows: a window is verified over several steps; an abort between them frees the
// target's KV and the draft model's slot, and the request beside it is unaffected.
TEST_F(DraftModelTest, AbortInTheMiddleOfAWindow) {
  EngineConfig c = engine_config(6);
  c.scheduler.chunk_size = 2;
  c.scheduler.max_tokens_per_step = 4;
  Engine engine(*model_, c, nullptr, model_.get());
  const RequestId victim = engine.add_request(request(40), {});
  Request other = request(12);
  other.prompt.push_back(77);
  std::vector<int32_t> other_tokens;
  RequestCallbacks cb;
  cb.on_token = [&](const TokenEvent& e) { other_tokens.push_back(e.token); };
  engine.add_request(other, cb);
  EXPECT_TRUE(testing::abort_mid_window(engine, victim)) << "no window was verified over several steps";
  EXPECT_EQ(engine.scheduler().kv_cache().stats().n_referenced, 0);
  EXPECT_EQ(other_tokens, run(engine_config(0), other, nullptr).tokens[0]);
}

// The off-switch: a draft model that guesses (almost) nothing pauses drafting; the adaptive
// run proposes fewer drafts, and its output is the same bits as plain decoding and as the
// non-adaptive run.
TEST_F(DraftModelTest, AdaptiveOffSwitchChangesNoBit) {
  Request r = request(80);
  r.ignore_eos = true;
  const Output plain = run(engine_config(0), r, nullptr);
  const Output fixed = run(engine_config(4), r, other_.get());
  const Output adaptive = run(engine_config(4, true), r, other_.get());
  expect_same(plain, fixed);
  expect_same(plain, adaptive);
  ASSERT_LT(fixed.stats.n_accepted_draft_tokens * 4, fixed.stats.n_draft_tokens)
      << "the other draft model guesses too well for this test";
  EXPECT_GT(adaptive.stats.n_draft_pauses, 0);
  EXPECT_LT(adaptive.stats.n_draft_tokens, fixed.stats.n_draft_tokens);
  // The target as its own drafter: every greedy draft accepted, yet each costs a whole
  // target step, so it pauses too (draft_policy.h's cost model) — with the same bits.
  const Output self = run(engine_config(4, true), r, model_.get());
  expect_same(plain, self);
  EXPECT_EQ(self.stats.n_accepted_draft_tokens, self.stats.n_draft_tokens);
  EXPECT_GT(self.stats.n_draft_pauses, 0);
}

TEST_F(DraftModelTest, RefusedByName) {
  auto refused = [&](const EngineConfig& c, const LlamaModel* draft, const std::string& word) {
    try {
      Engine engine(*model_, c, nullptr, draft);
      ADD_FAILURE() << "accepted; expected a refusal naming '" << word << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  refused(engine_config(4), nullptr, "--speculative-model");
  EngineConfig ngram = engine_config(4);
  ngram.speculative.method = SpeculativeMethod::kNgram;
  refused(ngram, model_.get(), "draft_model");
  ModelConfig small_vocab = config_;
  small_vocab.vocab_size = config_.vocab_size / 2;
  const ModelWeights w = make_synthetic_weights(small_vocab, 5);
  const LlamaModel mismatched(small_vocab, w, *ops_);
  refused(engine_config(4), &mismatched, "vocabulary");
  ModelConfig short_context = config_;
  short_context.max_position = 16;
  const ModelWeights ws = make_synthetic_weights(short_context, 5);
  const LlamaModel short_draft(short_context, ws, *ops_);
  refused(engine_config(4), &short_draft, "--max-model-len");
  EXPECT_EQ(parse_speculative_method("draft_model"), SpeculativeMethod::kDraftModel);
  EXPECT_EQ(speculative_method_name(SpeculativeMethod::kDraftModel), "draft_model");
}

// The policy's rule (draft_policy.h): grow on full acceptance, shrink to accepted + 1, pause
// once the windows stop paying for their cost, a one-draft probe after the pause, doubling
// pauses until a window pays.
TEST(DraftPolicy, LengthAndOffSwitch) {
  DraftPolicy fixed(5, false);
  fixed.on_window(5, 0, 10);
  EXPECT_EQ(fixed.draft_length(11), 5);  // not adaptive: always K
  // n-gram costs (row 0.2, no draft model).
  DraftPolicy p(5, true, 0.0, 0.2);
  EXPECT_EQ(p.draft_length(0), 5);
  p.on_window(5, 2, 3);  // e = 3 / 2 = 1.5, eff 1.25; rejected after 2: ask for 3
  EXPECT_EQ(p.draft_length(3), 3);
  p.on_window(3, 3, 7);  // whole window: one more; e = 4 / 1.6 = 2.5
  EXPECT_EQ(p.draft_length(7), 4);
  p.on_window(4, 0, 8);  // e = 1 / 1.8, eff (1.875 + 0.556) / 2 = 1.215: still on
  EXPECT_EQ(p.draft_length(8), 1);
  EXPECT_EQ(p.n_pauses(), 0);
  p.on_window(1, 0, 9);  // e = 1 / 1.2, eff 1.024
  EXPECT_EQ(p.n_pauses(), 0);
  p.on_window(1, 0, 10);  // eff 0.928 < 1: paused for kBackoffTokens
  EXPECT_EQ(p.n_pauses(), 1);
  EXPECT_EQ(p.draft_length(10 + DraftPolicy::kBackoffTokens - 1), 0);
  EXPECT_EQ(p.draft_length(10 + DraftPolicy::kBackoffTokens), 1);  // the probe
  const int32_t g = 10 + DraftPolicy::kBackoffTokens;
  p.on_window(1, 0, g + 1);  // a probe that does not pay: paused twice as long
  EXPECT_EQ(p.n_pauses(), 2);
  EXPECT_EQ(p.draft_length(g + 1 + 2 * DraftPolicy::kBackoffTokens - 1), 0);
  EXPECT_EQ(p.draft_length(g + 1 + 2 * DraftPolicy::kBackoffTokens), 1);
  p.on_window(1, 1, g + 40);  // an accepted probe pays (e = 2 / 1.2): drafting resumes, grows
  EXPECT_EQ(p.draft_length(g + 40), 2);
  EXPECT_EQ(p.n_pauses(), 2);
  // A draft model as costly as the target never pays, even when every draft is accepted:
  // e = (p + 1) / (1 + 1.2 p) < 1.
  DraftPolicy self(4, true, 1.0, 0.2);
  self.on_window(4, 4, 5);
  self.on_window(4, 4, 10);
  EXPECT_EQ(self.n_pauses(), 1);
}

}  // namespace
}  // namespace detllm::engine
