// TokenConstraint: what the engine needs of a constrained request's grammar state — the ids
// allowed at the next position, and moving that position forward or back. A pure interface
// (no library behind this header), so the engine builds without the grammar engine;
// structured/grammar_constraint.h makes one from a compiled grammar (xgrammar), and tests make
// faulty ones for the conformance suite's negative controls.
//
// The contract the engine's guarantee rests on (docs/structured_output.md, "Determinism"):
// after reset to the start, accepting tokens t_0 … t_{k-1} leaves a state whose bitmask is a
// function of (the grammar, t_0 … t_{k-1}) only; rollback(n) returns exactly to the state after
// the first n_accepted() - n tokens; fork() copies the state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "structured/grammar_spec.h"

namespace detllm::structured {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  // uint32 words of a bitmask for `width` ids: bit (id % 32) of word id / 32 is 1 when id is
  // allowed.
  static size_t bitmask_words(int32_t width) { return (static_cast<size_t>(width) + 31) / 32; }
  // The bitmask's width: ids [0, mask_width) may be allowed, ids beyond never are.
  virtual int32_t mask_width() const = 0;
  // Fills words (bitmask_words(mask_width()) of them) with the ids allowed next; false when
  // none is (the grammar is complete and its stop token was accepted, or nothing can follow).
  virtual bool fill_next_token_bitmask(std::span<uint32_t> words) = 0;
  // Accepts id if allowed here; false, state unchanged, otherwise.
  virtual bool accept_token(int32_t id) = 0;
  // Undoes the last n accepted tokens (0 <= n <= n_accepted()).
  virtual void rollback(int32_t n) = 0;
  virtual int32_t n_accepted() const = 0;
  // True once a stop token was accepted (the output is complete).
  virtual bool is_terminated() const = 0;
  // An independent copy at the same state.
  virtual std::unique_ptr<TokenConstraint> fork() const = 0;
};

// spec -> a constraint at its start, for one served vocabulary (made by
// structured::make_constraint_compiler, grammar_constraint.h); throws GrammarError for an
// invalid spec. Empty where the build has no grammar engine.
using ConstraintCompileFn =
    std::function<std::shared_ptr<const TokenConstraint>(const GrammarSpec& spec)>;

// Bit `id` of a bitmask of `width` ids (false for ids outside [0, width)).
inline bool bitmask_allows(std::span<const uint32_t> words, int32_t width, int32_t id) {
  return id >= 0 && id < width && ((words[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u) != 0;
}

}  // namespace detllm::structured
