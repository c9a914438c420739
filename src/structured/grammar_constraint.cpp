// make_constraint: a Matcher behind the engine's TokenConstraint interface.
#include "structured/grammar_constraint.h"

#include "structured/matcher.h"

namespace detllm::structured {
namespace {

class MatcherConstraint final : public TokenConstraint {
 public:
  explicit MatcherConstraint(Matcher m) : m_(std::move(m)) {}
  int32_t mask_width() const override { return m_.mask_width(); }
  bool fill_next_token_bitmask(std::span<uint32_t> words) override {
    return m_.fill_next_token_bitmask(words);
  }
  bool accept_token(int32_t id) override { return m_.accept_token(id); }
  void rollback(int32_t n) override { m_.rollback(n); }
  int32_t n_accepted() const override { return m_.n_accepted(); }
  bool is_terminated() const override { return m_.is_terminated(); }
  std::unique_ptr<TokenConstraint> fork() const override {
    return std::make_unique<MatcherConstraint>(m_.fork());
  }

 private:
  Matcher m_;
};

}  // namespace

std::shared_ptr<const TokenConstraint> make_constraint(const CompiledGrammar& grammar) {
  return std::make_shared<MatcherConstraint>(Matcher(grammar));
}

ConstraintCompileFn make_constraint_compiler(const Tokenizer& tokenizer, int32_t mask_width) {
  auto compiler = std::make_shared<const GrammarCompiler>(
      GrammarVocabulary::from_tokenizer(tokenizer, mask_width));
  return [compiler](const GrammarSpec& spec) { return make_constraint(compiler->compile(spec)); };
}

}  // namespace detllm::structured
