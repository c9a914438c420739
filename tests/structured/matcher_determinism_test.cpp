// A matcher's masks are a function of its token prefix: two matchers fed the same prefix give
// the same bits; rollback(n) then replaying the same tokens gives the same masks, bit for bit;
// from_tokens rebuilds the state. Negative control: a different prefix gives a different mask,
// and the comparison sees it.
#include <gtest/gtest.h>

#include "grammar_fixture.h"

namespace detllm::test {
namespace {

using structured::GrammarSpec;
using structured::Matcher;

constexpr const char* kSchema = R"({"type": "object", "properties": {
  "id": {"type": "integer"}, "label": {"type": "string", "maxLength": 12},
  "scores": {"type": "array", "items": {"type": "number"}, "maxItems": 4}},
  "required": ["id", "label", "scores"]})";

std::vector<uint32_t> mask_of(Matcher& m) {
  std::vector<uint32_t> w(Matcher::bitmask_words(m.mask_width()));
  m.fill_next_token_bitmask(w);
  return w;
}

TEST(MatcherDeterminism, SamePrefixSameMasks) {
  DETLLM_GRAMMAR_ENV(env);
  const auto g = env->compiler->compile(GrammarSpec::json_schema(kSchema));
  Matcher a(g);
  const Walk w = random_walk(*env, a, 11);
  ASSERT_GT(w.tokens.size(), 10u);
  // A second matcher, on a second compile of the same spec, fed the same tokens.
  const auto g2 = env->compiler->compile(GrammarSpec::json_schema(kSchema));
  Matcher b(g2);
  for (size_t k = 0; k < w.tokens.size(); ++k) {
    EXPECT_EQ(mask_of(b), w.masks[k]) << "position " << k;
    ASSERT_TRUE(b.accept_token(w.tokens[k]));
  }
  EXPECT_EQ(b.is_terminated(), w.terminated);
}

TEST(MatcherDeterminism, RollbackThenReplayIsBitIdentical) {
  DETLLM_GRAMMAR_ENV(env);
  const auto g = env->compiler->compile(GrammarSpec::json_schema(kSchema));
  Matcher m(g);
  const Walk w = random_walk(*env, m, 5);
  ASSERT_TRUE(w.terminated);
  const int32_t n = static_cast<int32_t>(w.tokens.size());
  ASSERT_EQ(m.n_accepted(), n);
  for (int32_t back : {1, 3, n / 2, n}) {
    m.rollback(back);
    EXPECT_FALSE(m.is_terminated());
    for (int32_t k = n - back; k < n; ++k) {
      EXPECT_EQ(mask_of(m), w.masks[static_cast<size_t>(k)]) << "back " << back << " pos " << k;
      ASSERT_TRUE(m.accept_token(w.tokens[static_cast<size_t>(k)]));
    }
    EXPECT_TRUE(m.is_terminated());
  }
  EXPECT_THROW(m.rollback(n + 1), Error);
  // Rebuilt from the tokens (preemption + recompute): the same masks.
  const size_t half = w.tokens.size() / 2;
  Matcher r = Matcher::from_tokens(g, std::span(w.tokens).first(half));
  EXPECT_EQ(mask_of(r), w.masks[half]);
  Matcher f = r.fork();
  ASSERT_TRUE(f.accept_token(w.tokens[half]));
  EXPECT_EQ(mask_of(r), w.masks[half]);  // the fork's token did not move r
  EXPECT_EQ(mask_of(f), w.masks[half + 1]);
  r.reset();
  EXPECT_EQ(mask_of(r), w.masks[0]);
  EXPECT_EQ(r.n_accepted(), 0);
}

TEST(MatcherDeterminism, DifferentPrefixDifferentMask) {
  DETLLM_GRAMMAR_ENV(env);
  const auto g = env->compiler->compile(GrammarSpec::json_schema(kSchema));
  Matcher a(g), b(g);
  const auto& tok = *env->tokenizer;
  for (int32_t id : tok.encode("{\"id\": 12", false)) ASSERT_TRUE(a.accept_token(id)) << id;
  for (int32_t id : tok.encode("{\"id\": 12, \"label\": \"", false)) ASSERT_TRUE(b.accept_token(id)) << id;
  EXPECT_NE(mask_of(a), mask_of(b));
  // Refused tokens leave the state alone: the mask is unchanged.
  const auto before = mask_of(a);
  const int32_t quote = tok.encode("\"", false).at(0);
  EXPECT_FALSE(a.accept_token(quote));
  EXPECT_EQ(mask_of(a), before);
  EXPECT_FALSE(a.accept_token(-1));
  EXPECT_FALSE(a.accept_token(a.mask_width()));
}

TEST(MatcherDeterminism, StopOnlyWhereComplete) {
  DETLLM_GRAMMAR_ENV(env);
  const auto g = env->compiler->compile(GrammarSpec::choice({"yes", "no"}));
  Matcher m(g);
  const int32_t eos = *env->tokenizer->eos_id();
  auto allows = [&](int32_t id) { auto w = mask_of(m); return (w[id / 32] >> (id % 32)) & 1u; };
  EXPECT_FALSE(allows(eos));
  EXPECT_FALSE(m.accept_token(eos));
  for (int32_t id : env->tokenizer->encode("yes", false)) ASSERT_TRUE(m.accept_token(id));
  EXPECT_TRUE(allows(eos));
  // Special tokens (other than the stop id) are never allowed inside the grammar's text.
  const auto im_start = env->tokenizer->token_to_id("<|im_start|>");
  ASSERT_TRUE(im_start.has_value());
  EXPECT_FALSE(allows(*im_start));
  ASSERT_TRUE(m.accept_token(eos));
  EXPECT_TRUE(m.is_terminated());
  std::vector<uint32_t> w(Matcher::bitmask_words(m.mask_width()));
  EXPECT_FALSE(m.fill_next_token_bitmask(w));  // nothing is allowed after the end
  EXPECT_FALSE(m.accept_token(eos));
}

}  // namespace
}  // namespace detllm::test
