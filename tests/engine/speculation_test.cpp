// Speculative decoding in the Engine (engine_speculation.cpp, docs/speculative.md) on a
// synthetic tiny model: a stop string inside an accepted window ends the request there, an abort in
// the middle of a window (verified over several steps) frees its KV, the per-request switch,
// constrained requests left out, and the configurations refused by name. Bit equality across models
// and executions is the conformance suite's (tests/conformance/speculation_checks.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "determinism/modes.h"
#include "engine/engine.h"
#include "engine/speculation_test_util.h"
#include "model/synthetic.h"
#include "tokenizer/tokenizer.h"

namespace detllm::engine {
namespace {

struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<int32_t> per_step;  // tokens emitted by each step
  FinishReason finish = FinishReason::kNone;
};

class SpeculationTest : public ::testing::Test {
 public:  // the checks below run in several modes as free functions
  void SetUp() override {
    config_ = synthetic_config("tiny-llama");
    weights_ = make_synthetic_weights(config_, 3);
    ops_ = kernels::make_cpu_ops(2);
    model_ = std::make_unique<LlamaModel>(config_, weights_, *ops_);
  }
  EngineConfig engine_config(int32_t k) const {
    EngineConfig c;
    c.scheduler.kv.block_size = 4;
    c.kv_cache_tokens = 512;
    if (k > 0) {
      c.speculative.method = SpeculativeMethod::kNgram;
      c.speculative.num_speculative_tokens = k;
    }
    return c;
  }
  // engine_config(k) under `mode` (apply_mode: padded's fixed decode shape of max_seqs rows).
  EngineConfig mode_config(int32_t k, DeterminismMode mode, int32_t max_seqs = 8) const {
    EngineConfig c = engine_config(k);
    c.scheduler.max_seqs = max_seqs;
    apply_mode(mode, c);
    return c;
  }
  // A repetitive prompt, greedy: the drafter proposes from the first decode step on.
  Request request(int32_t max_tokens) const {
    Request r;
    const int32_t pattern[] = {11, 57, 203, 9, 140};
    for (int i = 0; i < 30; ++i) r.prompt.push_back(pattern[i % 5]);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    return r;
  }
  Output run(const EngineConfig& c, const Request& r, EngineStats* stats = nullptr,
             const Tokenizer* tokenizer = nullptr) {
    Engine engine(*model_, c, tokenizer);
    Output out;
    RequestCallbacks cb;
    cb.on_token = [&](const TokenEvent& e) {
      out.tokens.push_back(e.token);
      out.logprobs.push_back(e.logprob);
    };
    cb.on_finish = [&](int32_t, FinishReason reason, const Usage&) { out.finish = reason; };
    engine.add_request(r, cb);
    size_t before = 0;
    while (engine.step()) {
      out.per_step.push_back(static_cast<int32_t>(out.tokens.size() - before));
      before = out.tokens.size();
      engine.scheduler().check_consistency();
    }
    EXPECT_EQ(engine.scheduler().kv_cache().stats().n_referenced, 0);
    if (stats) *stats = engine.stats();
    return out;
  }
  static void expect_same(const Output& a, const Output& b) {
    EXPECT_EQ(a.tokens, b.tokens);
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    EXPECT_EQ(0, std::memcmp(a.logprobs.data(), b.logprobs.data(), a.logprobs.size() * 4));
    EXPECT_EQ(a.finish, b.finish);
  }
  int32_t vocab_size() const { return config_.vocab_size; }
  const LlamaModel& model() const { return *model_; }

 protected:
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<kernels::Ops> ops_;
  std::unique_ptr<LlamaModel> model_;
};

TEST_F(SpeculationTest, SameTokensAndLogprobsWithFewerSteps) {
  const Request r = request(40);
  EngineStats stats;
  const Output plain = run(engine_config(0), r);
  const Output spec = run(engine_config(4), r, &stats);
  expect_same(plain, spec);
  EXPECT_GT(stats.n_accepted_draft_tokens, 0);
  EXPECT_LE(stats.n_accepted_draft_tokens, stats.n_draft_tokens);
  EXPECT_LT(spec.per_step.size(), plain.per_step.size());
}

// A stop string completed by an accepted draft: the request ends there, the window's later
// drafts and draws are discarded, and the output is plain decoding's.
void stop_string_inside_an_accepted_window(SpeculationTest& t, const EngineConfig& plain_config,
                                           const EngineConfig& spec_config) {
  // A word-level tokenizer over the model's vocabulary: token i is "t<i>", decoded with spaces.
  std::string json = R"({"model": {"type": "BPE", "merges": [], "vocab": {)";
  for (int32_t i = 0; i < t.vocab_size(); ++i) {
    json += (i ? ", " : "") + ("\"t" + std::to_string(i) + "\": ") + std::to_string(i);
  }
  json += "}}}";
  const auto tok = Tokenizer::from_json_string(json, "words.json");
  const Request r = t.request(40);
  const Output spec = t.run(spec_config, r, nullptr, tok.get());
  // An accepted draft (a step that emitted m tokens accepted its first m - 1) that is not the
  // window's last, and the 2…6 tokens ending with it, whose text does not occur before it.
  std::string stop;
  int32_t stop_at = -1;
  size_t begin = 0;
  for (const int32_t m : spec.per_step) {
    for (int32_t j = 0; j + 2 < m && stop_at < 0; ++j) {
      const size_t i = begin + static_cast<size_t>(j);
      const std::span<const int32_t> out(spec.tokens);
      const std::string before = tok->decode(out.first(i));
      for (size_t len = 2; len <= 6 && len <= i + 1 && stop_at < 0; ++len) {
        const std::string text = tok->decode(out.subspan(i + 1 - len, len));
        if (before.find(text) == std::string::npos) {
          stop = text;
          stop_at = static_cast<int32_t>(i);
        }
      }
    }
    begin += static_cast<size_t>(m);
  }
  ASSERT_GE(stop_at, 0) << "no window accepted two drafts";
  Request stopping = r;
  stopping.stop = {stop};
  const Output plain = t.run(plain_config, stopping, nullptr, tok.get());
  const Output spec_stop = t.run(spec_config, stopping, nullptr, tok.get());
  SpeculationTest::expect_same(plain, spec_stop);
  EXPECT_EQ(spec_stop.finish, FinishReason::kStop);
  EXPECT_EQ(spec_stop.tokens.size(), static_cast<size_t>(stop_at) + 1) << "stop '" << stop << "'";
}

TEST_F(SpeculationTest, StopStringInsideAnAcceptedWindow) {
  stop_string_inside_an_accepted_window(*this, engine_config(0), engine_config(6));
}

// The same in the modes that verify windows their own way: padded (decode rows of the
// fixed-shape step) and verified (the drafts as the deterministic request's candidates).
TEST_F(SpeculationTest, StopStringInsideAnAcceptedWindowPaddedAndVerified) {
  for (DeterminismMode mode : {DeterminismMode::kPadded, DeterminismMode::kVerified}) {
    SCOPED_TRACE(determinism_mode_name(mode));
    stop_string_inside_an_accepted_window(*this, mode_config(0, mode), mode_config(6, mode));
  }
}

// max_tokens inside a window: drafts never run past it (room is left for the last draw).
TEST_F(SpeculationTest, MaxTokensIsExact) {
  for (int32_t max_tokens : {1, 2, 3, 7, 13}) {
    const Request r = request(max_tokens);
    const Output plain = run(engine_config(0), r);
    const Output spec = run(engine_config(8), r);
    expect_same(plain, spec);
    EXPECT_EQ(spec.tokens.size(), static_cast<size_t>(max_tokens));
    EXPECT_EQ(spec.finish, FinishReason::kLength);
  }
}

// A window of drafts verified over several steps: an abort between them frees the sequence's
// KV (drafts included); a request beside it is unaffected.
void abort_in_the_middle_of_a_window(SpeculationTest& t, const EngineConfig& plain_config,
                                     const EngineConfig& spec_config) {
  Engine engine(t.model(), spec_config);
  const RequestId victim = engine.add_request(t.request(40), {});
  Request other = t.request(12);
  other.prompt.push_back(77);
  std::vector<int32_t> other_tokens;
  RequestCallbacks cb;
  cb.on_token = [&](const TokenEvent& e) { other_tokens.push_back(e.token); };
  engine.add_request(other, cb);
  EXPECT_TRUE(testing::abort_mid_window(engine, victim))
      << "no window was verified over several steps";
  EXPECT_EQ(engine.status(victim).state, RequestStatus::State::kUnknown);
  EXPECT_EQ(engine.scheduler().kv_cache().stats().n_referenced, 0);
  EXPECT_EQ(other_tokens, t.run(plain_config, other).tokens);
}

// Chunks of 2 rows: the window is verified over several steps.
TEST_F(SpeculationTest, AbortInTheMiddleOfAWindow) {
  EngineConfig c = engine_config(6);
  c.scheduler.chunk_size = 2;
  c.scheduler.max_tokens_per_step = 4;
  abort_in_the_middle_of_a_window(*this, engine_config(0), c);
}

// padded: a decode step of 4 rows holds the two sequences' last tokens and 2 more of one
// window, so a window of 7 rows takes several steps. verified: chunks of 2, as above.
TEST_F(SpeculationTest, AbortInTheMiddleOfAWindowPaddedAndVerified) {
  abort_in_the_middle_of_a_window(*this, mode_config(0, DeterminismMode::kPadded, 4),
                                  mode_config(6, DeterminismMode::kPadded, 4));
  EngineConfig verified = mode_config(6, DeterminismMode::kVerified);
  verified.scheduler.chunk_size = 2;
  verified.scheduler.max_tokens_per_step = 4;
  abort_in_the_middle_of_a_window(*this, mode_config(0, DeterminismMode::kVerified), verified);
}

TEST_F(SpeculationTest, RequestCanOptOut) {
  Request r = request(20);
  r.speculation = false;
  EngineStats stats;
  const Output spec = run(engine_config(4), r, &stats);
  EXPECT_EQ(stats.n_draft_tokens, 0);
  expect_same(run(engine_config(0), r), spec);
}

// A grammar that allows every id of the vocabulary and never ends.
class AnyToken final : public structured::TokenConstraint {
 public:
  explicit AnyToken(int32_t width) : width_(width) {}
  int32_t mask_width() const override { return width_; }
  bool fill_next_token_bitmask(std::span<uint32_t> words) override {
    std::fill(words.begin(), words.end(), ~0u);
    if (const int32_t rest = width_ % 32) words.back() = (uint32_t{1} << rest) - 1;
    return true;
  }
  bool accept_token(int32_t) override {
    ++n_;
    return true;
  }
  void rollback(int32_t n) override { n_ -= n; }
  int32_t n_accepted() const override { return n_; }
  bool is_terminated() const override { return false; }
  std::unique_ptr<TokenConstraint> fork() const override {
    return std::make_unique<AnyToken>(*this);
  }

 private:
  int32_t width_;
  int32_t n_ = 0;
};

// Structured output is excluded: a request with a grammar is never drafted for (and decodes as
// it would without speculation).
TEST_F(SpeculationTest, ConstrainedRequestsAreNotDraftedFor) {
  Request r = request(20);
  r.constraint = std::make_shared<AnyToken>(config_.vocab_size);
  EngineStats stats;
  const Output spec = run(engine_config(4), r, &stats);
  EXPECT_EQ(stats.n_draft_tokens, 0);
  expect_same(run(engine_config(0), r), spec);
}

TEST_F(SpeculationTest, EveryModeSpeculatesBadSettingsRefused) {
  auto make = [&](const EngineConfig& c) { Engine engine(*model_, c); };
  for (DeterminismMode mode : {DeterminismMode::kFast, DeterminismMode::kInvariant,
                               DeterminismMode::kBiNaive, DeterminismMode::kPadded,
                               DeterminismMode::kVerified}) {
    EngineConfig c = engine_config(4);
    apply_mode(mode, c);
    EXPECT_NO_THROW(make(c)) << determinism_mode_name(mode);
  }
  EngineConfig zero = engine_config(4);
  zero.speculative.num_speculative_tokens = 0;
  EXPECT_THROW(make(zero), Error);
  EngineConfig lookup = engine_config(4);
  lookup.speculative.prompt_lookup_min = 3;
  lookup.speculative.prompt_lookup_max = 2;
  EXPECT_THROW(make(lookup), Error);
  EXPECT_EQ(parse_speculative_method("ngram"), SpeculativeMethod::kNgram);
  EXPECT_THROW(parse_speculative_method("eagle"), Error);
}

// The lookup bounds default as vLLM's: both unset → 5 and 5; one unset → the other's value.
TEST(SpeculationConfig, LookupBoundsDefaultAsVllm) {
  const auto bounds = [](int32_t lo, int32_t hi) {
    SpeculativeConfig c;
    c.method = SpeculativeMethod::kNgram;
    c.prompt_lookup_min = lo;
    c.prompt_lookup_max = hi;
    const SpeculativeConfig d = c.with_defaults();
    return std::pair{d.prompt_lookup_min, d.prompt_lookup_max};
  };
  EXPECT_EQ(bounds(0, 0), (std::pair{5, 5}));
  EXPECT_EQ(bounds(0, 3), (std::pair{3, 3}));
  EXPECT_EQ(bounds(2, 0), (std::pair{2, 2}));
  EXPECT_EQ(bounds(2, 4), (std::pair{2, 4}));
}

}  // namespace
}  // namespace detllm::engine
