// Constrained requests (engine::Request::constraint, a grammar from xgrammar) inside the
// determinism conformance suite, on the CPU: random workloads whose sampled requests carry JSON
// schemas, regexes, choices, json_object and a grammar that runs into a dead end, run under the
// execution variations — batch vs each request alone (V1), staggered arrival (V2), chunked
// prefill (V3), scoring the generated tokens (V4), prefix-cache hits (V5), preemption and
// recompute (V6), shuffled pages (V7), thread count (V11), host sampling — and the verified mode
// (rollbacks, the matcher rolled back with the KV) against the invariant one, bit for bit. The
// spec: every token is allowed by its prefix's grammar mask, greedy picks the best allowed id,
// and the reported logprobs are the model's unmasked ones. Two negative controls must fail the
// suite: a mask that depends on the batch, and a matcher that is not rolled back.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "conformance/execution_variations.h"
#include "conformance/perturbed_fast_ops.h"
#include "conformance/verified_run.h"
#include "determinism/modes.h"
#include "kernels/sampling/sampler.h"
#include "model/llama_model.h"
#include "model/synthetic.h"
#include "structured/constrained_workload.h"
#include "structured/matcher.h"
#include "verify/conformance.h"

namespace detllm::conformance {
namespace {

class Constrained : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = synthetic_config("tiny-llama");
    ASSERT_EQ(config_.vocab_size, 512);
    weights_ = make_synthetic_weights(config_, 42);
    target_.name = "tiny-llama";
    target_.config = &config_;
    target_.weights = &weights_;
    target_.make_ops = [](int n) { return kernels::make_cpu_ops(n); };
    reqs_ = constrained_requests(config_.vocab_size);
  }
  ModelConfig config_;
  ModelWeights weights_;
  Target target_;
  std::vector<engine::Request> reqs_;
};

std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& words, int32_t width) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < width; ++id)
    if ((words[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) ids.push_back(id);
  return ids;
}

// The spec, token by token, from a fresh matcher over each sample's own tokens: the token is
// allowed by its prefix's mask; the logprob and top logprobs are those of the model's captured
// (unmasked) row; greedy takes the allowed id with the best logit (lowest id on ties); a sample
// that ends with "grammar" has nothing allowed after its tokens.
TEST_F(Constrained, EveryTokenFollowsItsOwnPrefixMaskAndLogprobsAreTheModels) {
  const RunResult got = run(target_, base_execution("batch"), reqs_);
  std::vector<engine::Request> plain = reqs_;
  for (auto& r : plain) r.constraint.reset();
  const RunResult free = run(target_, base_execution("unconstrained"), plain);
  const auto specs = grammar_specs();
  int64_t checked = 0;
  int changed = 0, dead_ends = 0, grammar_stops = 0;
  for (size_t i = 0; i < reqs_.size(); ++i) {
    const engine::Request& r = reqs_[i];
    if (!r.constraint || r.max_tokens == 0) continue;
    const RequestTrace& t = got.traces[i];
    changed += t.tokens != free.traces[i].tokens;
    for (size_t k = 0; k < t.tokens.size(); ++k) {
      auto m = r.constraint->fork();
      std::vector<uint32_t> words(TokenConstraint::bitmask_words(m->mask_width()));
      const int32_t n_prompt = static_cast<int32_t>(r.prompt.size());
      for (size_t j = 0; j < t.tokens[k].size(); ++j) {
        const int32_t token = t.tokens[k][j];
        const int32_t pos = n_prompt + static_cast<int32_t>(j);
        ASSERT_TRUE(m->fill_next_token_bitmask(words)) << "request " << i << " token " << j;
        const auto allowed = allowed_ids(words, m->mask_width());
        ASSERT_TRUE(std::binary_search(allowed.begin(), allowed.end(), token))
            << "request " << i << " sample " << k << ": token " << token << " at " << j
            << " is not allowed by its grammar";
        const auto row = t.logits.at({static_cast<int32_t>(k), pos});
        const float want = logprob_of(row, token);
        ASSERT_EQ(std::bit_cast<uint32_t>(want), std::bit_cast<uint32_t>(t.logprobs[k][j]));
        ASSERT_EQ(top_logprobs(row, r.sampling.n_logprobs), t.top_logprobs[k][j]);
        if (r.sampling.is_greedy()) {
          int32_t best = allowed[0];
          for (int32_t a : allowed)
            if (row[static_cast<size_t>(a)] > row[static_cast<size_t>(best)]) best = a;
          ASSERT_EQ(token, best) << "request " << i << " token " << j;
        }
        ASSERT_TRUE(m->accept_token(token));
        ++checked;
      }
      if (t.finish[k] == engine::FinishReason::kGrammar) {
        ++dead_ends;
        EXPECT_FALSE(m->fill_next_token_bitmask(words)) << "request " << i;
        EXPECT_FALSE(m->is_terminated());
      }
      grammar_stops += t.finish[k] == engine::FinishReason::kStop && m->is_terminated();
    }
  }
  EXPECT_GT(checked, 80);
  EXPECT_GE(changed, 4) << "the grammars changed almost no request's tokens";
  EXPECT_GE(dead_ends, 1) << "no sample ran into the dead-end grammar";
  EXPECT_GE(grammar_stops, 1) << "no sample finished its grammar with the stop id";
}

TEST_F(Constrained, SameBitsUnderEveryExecutionVariation) {
  const RunResult ref = run(target_, base_execution("batch"), reqs_);
  expect_same_under_variations(target_, reqs_, ref);
  Execution warm = base_execution("prefix cache");
  warm.warmup = partial_prefix_warmup(reqs_);
  const RunResult cached = run(target_, warm, reqs_);
  EXPECT_GT(cached.n_cached_tokens, 0);
  const auto m = first_mismatch(reqs_, ref.traces, cached.traces);
  EXPECT_FALSE(m.has_value()) << "V5 prefix-cache hits: " << m->what;
}

// V4: scoring the generated tokens (prompt logprobs, no grammar needed) gives the generation's
// logits and logprobs: the reported logprobs are the model's, not the masked distribution's.
TEST_F(Constrained, ScoringTheOutputGivesTheGenerationsBits) {
  const RunResult gen = run(target_, base_execution("generate"), reqs_);
  const auto scoring = scoring_requests(reqs_, gen);
  const RunResult score = run(target_, base_execution("score"), scoring);
  size_t n = 0;
  const auto m = compare_generation_scoring(reqs_, gen, score, &n);
  EXPECT_FALSE(m.has_value()) << m->what;
  EXPECT_GT(n, 80u);
}

engine::EngineConfig verified_config() {
  engine::EngineConfig ec = base_engine_config();
  ec.self_check = SelfCheckVerdict::disabled();
  return ec;
}

Outcome run_mode(const ModelConfig& config, const ModelWeights& weights, DeterminismMode mode,
                 engine::EngineConfig ec, const std::vector<engine::Request>& reqs) {
  PerturbedFastOps ops(2, 2e-3f);
  LlamaModel model(config, weights, ops);
  return run_verified_workload(model, mode, ec, reqs);
}

// The verified mode (fast candidates under the grammar, verification, rollback of the
// candidates and of the matcher) gives the invariant mode's bits, also when it preempts.
TEST_F(Constrained, VerifiedModeEqualsInvariant) {
  engine::EngineConfig ec = verified_config();
  const auto ref = run_mode(config_, weights_, DeterminismMode::kInvariant, ec, reqs_);
  ec.verify.window = 5;
  const auto verified = run_mode(config_, weights_, DeterminismMode::kVerified, ec, reqs_);
  EXPECT_GT(verified.stats.n_rollbacks, 0);
  auto m = first_mismatch(reqs_, ref.traces, verified.traces);
  EXPECT_FALSE(m.has_value()) << "verified: " << m->what;
  ec.scheduler.kv.n_blocks = 24;
  const auto small = run_mode(config_, weights_, DeterminismMode::kVerified, ec, reqs_);
  EXPECT_GT(small.preemptions, 0);
  m = first_mismatch(reqs_, ref.traces, small.traces);
  EXPECT_FALSE(m.has_value()) << "verified, preempting: " << m->what;
}

// ---- negative controls: faulty grammar states the suite must catch ----

// Forwards everything to a real grammar state.
class ForwardingConstraint : public TokenConstraint {
 public:
  explicit ForwardingConstraint(std::unique_ptr<TokenConstraint> inner) : inner_(std::move(inner)) {}
  int32_t mask_width() const override { return inner_->mask_width(); }
  bool fill_next_token_bitmask(std::span<uint32_t> w) override {
    return inner_->fill_next_token_bitmask(w);
  }
  bool accept_token(int32_t id) override { return inner_->accept_token(id); }
  void rollback(int32_t n) override { inner_->rollback(n); }
  int32_t n_accepted() const override { return inner_->n_accepted(); }
  bool is_terminated() const override { return inner_->is_terminated(); }

 protected:
  std::unique_ptr<TokenConstraint> inner_;
};

// A mask that depends on the batch: every fill, by any request, moves a shared counter, and
// each mask drops the allowed id that counter points at (what a mask computed from the step's
// batch instead of the request's own prefix amounts to). Tokens still follow the grammar.
class BatchLeakingConstraint final : public ForwardingConstraint {
 public:
  using ForwardingConstraint::ForwardingConstraint;
  static inline uint64_t fills = 0;
  bool fill_next_token_bitmask(std::span<uint32_t> w) override {
    if (!inner_->fill_next_token_bitmask(w)) return false;
    const auto ids = allowed_ids(std::vector<uint32_t>(w.begin(), w.end()), mask_width());
    if (ids.size() > 1) {
      const int32_t drop = ids[fills++ % ids.size()];
      w[static_cast<size_t>(drop) / 32] &= ~(1u << (drop % 32));
    }
    return true;
  }
  std::unique_ptr<TokenConstraint> fork() const override {
    return std::make_unique<BatchLeakingConstraint>(inner_->fork());
  }
};

// A matcher never rolled back: rollback is ignored, and a token the (now wrong) state refuses
// is taken without moving it — the masks after a verified-mode rollback come from a state that
// still holds the dropped candidates.
class NoRollbackConstraint final : public ForwardingConstraint {
 public:
  using ForwardingConstraint::ForwardingConstraint;
  bool accept_token(int32_t id) override {
    inner_->accept_token(id);
    ++accepted_;
    return true;
  }
  void rollback(int32_t n) override { accepted_ -= n; }
  int32_t n_accepted() const override { return accepted_; }
  std::unique_ptr<TokenConstraint> fork() const override {
    auto f = std::make_unique<NoRollbackConstraint>(inner_->fork());
    f->accepted_ = accepted_;
    return f;
  }

 private:
  int32_t accepted_ = 0;
};

template <typename Faulty>
std::shared_ptr<const TokenConstraint> faulty(const structured::CompiledGrammar& g) {
  return std::make_shared<Faulty>(structured::make_constraint(g)->fork());
}

TEST_F(Constrained, NegativeControlBatchDependentMaskFailsV1) {
  std::vector<engine::Request> reqs = reqs_;
  for (auto& r : reqs) r.constraint.reset();
  add_constraints(reqs, faulty<BatchLeakingConstraint>);
  const RunResult ref = run(target_, base_execution("batch"), reqs);
  int differing = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RunResult alone = run(target_, base_execution("alone"), {reqs[i]});
    differing += compare(ref.traces[i], alone.traces[0]).has_value();
  }
  EXPECT_GE(differing, 1) << "V1 did not see a mask that depends on the batch";
}

TEST_F(Constrained, NegativeControlMatcherNotRolledBackFailsVerified) {
  std::vector<engine::Request> reqs = reqs_;
  for (auto& r : reqs) r.constraint.reset();
  add_constraints(reqs, faulty<NoRollbackConstraint>);
  engine::EngineConfig ec = verified_config();
  const auto ref = run_mode(config_, weights_, DeterminismMode::kInvariant, ec, reqs);
  ec.verify.window = 5;
  bool caught = false;
  try {
    const auto verified = run_mode(config_, weights_, DeterminismMode::kVerified, ec, reqs);
    EXPECT_GT(verified.stats.n_rollbacks, 0);
    caught = first_mismatch(reqs, ref.traces, verified.traces).has_value();
  } catch (const Error& e) {
    caught = true;  // the engine refused a token its (wrong) state did not allow
  }
  EXPECT_TRUE(caught) << "the verified mode's suite did not see a matcher left un-rolled-back";
}

}  // namespace
}  // namespace detllm::conformance
