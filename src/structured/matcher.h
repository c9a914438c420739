// Matcher: one constrained output's position in its grammar. The engine reaches it through
// the TokenConstraint interface (grammar_constraint.h, engine/grammar_cursor.h): it asks for the
// next token's bitmask before sampling and tells it the tokens drawn (docs/structured_output.md).
//
// Determinism: a Matcher's state — and so every bitmask it fills — is a function of the
// CompiledGrammar and the tokens accepted since reset, nothing else (no clock, no batch, no
// other request). rollback(n) returns exactly to the state after the first accepted-n tokens,
// so preemption with recompute and the verified mode's rollback can rebuild it (or replay
// with from_tokens), bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "structured/compiler.h"

namespace detllm::structured {

class Matcher {
 public:
  explicit Matcher(const CompiledGrammar& grammar);
  // A matcher that has accepted `tokens`; throws GrammarError naming the first refused one.
  static Matcher from_tokens(const CompiledGrammar& grammar, std::span<const int32_t> tokens);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;
  // An independent copy at the same state (the library's Fork).
  Matcher fork() const;

  // uint32 words of a bitmask for `mask_width` ids: bit (id % 32) of word id / 32 is 1 when id
  // is allowed.
  static size_t bitmask_words(int32_t mask_width) { return (static_cast<size_t>(mask_width) + 31) / 32; }
  int32_t mask_width() const;

  // Fills `words` (bitmask_words(mask_width()) of them) with the ids allowed next. Returns false
  // when none is (a terminated matcher, or a grammar that allows nothing here: the request
  // cannot go on and the engine ends it).
  bool fill_next_token_bitmask(std::span<uint32_t> words);
  // Accepts `id` if the grammar allows it here (a stop id only where the grammar is complete:
  // it terminates the matcher). Returns false, state unchanged, otherwise.
  bool accept_token(int32_t id);
  // Undoes the last n accepted tokens (n <= n_accepted(); detllm::Error otherwise).
  void rollback(int32_t n);
  // True after a stop id was accepted.
  bool is_terminated() const;
  // Back to the start of the grammar.
  void reset();
  // Tokens accepted since construction or reset, minus rolled back ones.
  int32_t n_accepted() const { return n_accepted_; }

 private:
  struct Impl;
  explicit Matcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  int32_t n_accepted_ = 0;
};

}  // namespace detllm::structured
