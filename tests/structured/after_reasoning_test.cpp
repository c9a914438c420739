// AfterReasoning (structured/after_reasoning.h): the grammar of a thinking model's request
// starts after the first reasoning end marker, and the TokenConstraint contract still holds —
// masks are a function of the accepted tokens, rollback (also back into the reasoning) and fork
// return exactly the state that accepting the same tokens gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "grammar_fixture.h"
#include "structured/after_reasoning.h"
#include "structured/grammar_constraint.h"

namespace detllm::structured {
namespace {

struct Fixture {
  std::shared_ptr<const TokenConstraint> json;  // json_object, at its start
  std::vector<int32_t> marker;                  // "</think>"
  std::vector<int32_t> open;                    // "<think>" (optional reasoning), or empty
  std::vector<int32_t> thought;                 // some reasoning text
  std::vector<int32_t> answer;                  // a JSON object the grammar accepts
};

Fixture make_fixture(const test::GrammarEnv& env, bool optional_reasoning = false) {
  Fixture s;
  if (optional_reasoning) s.open = env.tokenizer->encode("<think>", false);
  s.json = make_constraint(env.compiler->compile(GrammarSpec::json_object()));
  s.marker = env.tokenizer->encode("</think>", false);
  s.thought = env.tokenizer->encode("The user wants JSON. {not json here", false);
  s.answer = env.tokenizer->encode("{\"a\": 1}", false);
  return s;
}

std::vector<uint32_t> mask_of(TokenConstraint& c) {
  std::vector<uint32_t> words(TokenConstraint::bitmask_words(c.mask_width()));
  c.fill_next_token_bitmask(words);
  return words;
}

std::unique_ptr<TokenConstraint> gated(const Fixture& s) {
  return std::make_unique<AfterReasoning>(s.json->fork(), s.marker, s.open);
}

// The state after accepting `tokens` from the start (each must be accepted).
std::unique_ptr<TokenConstraint> after(const Fixture& s, const std::vector<int32_t>& tokens) {
  auto c = gated(s);
  for (int32_t t : tokens) EXPECT_TRUE(c->accept_token(t)) << "token " << t;
  return c;
}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(AfterReasoning, EveryIdIsAllowedWhileReasoningAndTheGrammarAfterTheMarker) {
  DETLLM_GRAMMAR_ENV(env);
  const Fixture s = make_fixture(*env);
  ASSERT_GT(s.marker.size(), 0u);
  auto c = after(s, s.thought);  // "{not json" is no JSON object, yet it is accepted
  const std::vector<uint32_t> free = mask_of(*c);
  EXPECT_EQ(test::allowed_ids(free, c->mask_width()).size(), static_cast<size_t>(c->mask_width()));
  for (int32_t t : s.marker) ASSERT_TRUE(c->accept_token(t));
  auto plain = s.json->fork();
  EXPECT_EQ(mask_of(*c), mask_of(*plain)) << "after the marker: the grammar at its start";
  for (int32_t t : s.answer) ASSERT_TRUE(c->accept_token(t));
  EXPECT_FALSE(c->accept_token(s.thought.back())) << "the grammar refuses text after the JSON";
  EXPECT_FALSE(c->is_terminated());
}

void expect_rollback_and_fork_match(const Fixture& s, const std::vector<int32_t>& all) {
  auto c = after(s, all);
  // Every rollback depth: into the answer, onto the marker, into the reasoning, to the start.
  for (size_t keep = all.size() + 1; keep-- > 0;) {
    SCOPED_TRACE(::testing::Message() << "keep " << keep);
    auto fork = c->fork();
    fork->rollback(static_cast<int32_t>(all.size() - keep));
    const std::vector<int32_t> prefix(all.begin(), all.begin() + static_cast<ptrdiff_t>(keep));
    auto fresh = after(s, prefix);
    EXPECT_EQ(fork->n_accepted(), static_cast<int32_t>(keep));
    EXPECT_EQ(mask_of(*fork), mask_of(*fresh));
    // Replaying the rest from there gives the whole state's mask again.
    for (size_t i = keep; i < all.size(); ++i) ASSERT_TRUE(fork->accept_token(all[i]));
    EXPECT_EQ(mask_of(*fork), mask_of(*c));
  }
}

TEST(AfterReasoning, RollbackAndForkGiveTheStateOfTheSameTokens) {
  DETLLM_GRAMMAR_ENV(env);
  const Fixture s = make_fixture(*env);
  expect_rollback_and_fork_match(s, cat({s.thought, s.marker, s.answer}));
  const Fixture q = make_fixture(*env, /*optional_reasoning=*/true);
  expect_rollback_and_fork_match(q, cat({q.open, q.thought, q.marker, q.answer}));
  expect_rollback_and_fork_match(q, q.answer);
}

TEST(AfterReasoning, OptionalReasoningOpensWithTheMarkerOrIsUnderTheGrammarFromTheStart) {
  DETLLM_GRAMMAR_ENV(env);
  const Fixture q = make_fixture(*env, /*optional_reasoning=*/true);
  ASSERT_GT(q.open.size(), 0u);
  const int32_t width = q.json->mask_width();
  // First token: the grammar's first tokens and the marker's first id, nothing else.
  auto c = gated(q);
  auto plain = q.json->fork();
  std::vector<int32_t> first = test::allowed_ids(mask_of(*plain), width);
  first.push_back(q.open[0]);
  std::sort(first.begin(), first.end());
  first.erase(std::unique(first.begin(), first.end()), first.end());
  EXPECT_EQ(test::allowed_ids(mask_of(*c), width), first);
  EXPECT_FALSE(c->accept_token(q.thought[0])) << "free text before any marker is refused";
  // Opening: the rest of the marker is forced, then free reasoning, then the grammar.
  ASSERT_TRUE(c->accept_token(q.open[0]));
  for (size_t i = 1; i < q.open.size(); ++i) {
    EXPECT_EQ(test::allowed_ids(mask_of(*c), width), std::vector<int32_t>{q.open[i]});
    ASSERT_TRUE(c->accept_token(q.open[i]));
  }
  EXPECT_EQ(test::allowed_ids(mask_of(*c), width).size(), static_cast<size_t>(width));
  for (int32_t t : cat({q.thought, q.marker})) ASSERT_TRUE(c->accept_token(t));
  EXPECT_EQ(mask_of(*c), mask_of(*q.json->fork()));
  // Without the marker the grammar holds from the first token: no reasoning can follow.
  auto direct = after(q, q.answer);
  EXPECT_FALSE(direct->accept_token(q.open[0]));
  EXPECT_EQ(mask_of(*direct), mask_of(*after(q, q.answer)));
  auto grammar_only = q.json->fork();
  for (int32_t t : q.answer) ASSERT_TRUE(grammar_only->accept_token(t));
  EXPECT_EQ(mask_of(*direct), mask_of(*grammar_only));
}

TEST(AfterReasoning, TheLastMarkerOfAPromptIsFound) {
  const std::vector<int32_t> marker = {7, 8};
  EXPECT_EQ(AfterReasoning::end_of_last(std::vector<int32_t>{1, 7, 8, 3, 7, 8, 5}, marker), 6u);
  EXPECT_EQ(AfterReasoning::end_of_last(std::vector<int32_t>{1, 7, 8}, marker), 3u);
  EXPECT_EQ(AfterReasoning::end_of_last(std::vector<int32_t>{1, 7, 3, 8}, marker), std::nullopt);
  EXPECT_EQ(AfterReasoning::end_of_last(std::vector<int32_t>{1, 7, 8}, {}), std::nullopt);
}

}  // namespace
}  // namespace detllm::structured
