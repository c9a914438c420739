// GrammarCursor: one sample's grammar state (structured/token_constraint.h), kept in step with
// the sample's tokens. The engine asks for the bitmask of a position by giving the generated
// tokens before it; the cursor rolls back past any token that differs from what it accepted
// (the verified mode's rollback: candidates replaced by the verifier's token) and accepts what
// is new. So a mask is a function of (grammar, generated prefix) alone — whatever the batch,
// the chunking, a preemption (tokens kept, KV recomputed) or a verification — which is what
// the determinism contract needs (docs/structured_output.md, "Determinism").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "structured/token_constraint.h"

namespace detllm::engine {

class GrammarCursor {
 public:
  explicit GrammarCursor(std::unique_ptr<structured::TokenConstraint> state);
  GrammarCursor fork() const;

  int32_t mask_width() const { return state_->mask_width(); }
  size_t mask_words() const { return structured::TokenConstraint::bitmask_words(mask_width()); }
  // Brings the state to "accepted exactly `generated`" and fills `words` (mask_words()) with the
  // ids allowed next; false when none is. Throws detllm::Error when a token of `generated` is
  // not allowed by the grammar (the engine drew it under the mask, so that is a defect).
  bool mask_after(std::span<const int32_t> generated, std::span<uint32_t> words);
  // The grammar is complete (its stop token was accepted) at the last mask_after's position.
  bool complete() const { return state_->is_terminated(); }

 private:
  GrammarCursor(std::unique_ptr<structured::TokenConstraint> state, std::vector<int32_t> accepted);
  std::unique_ptr<structured::TokenConstraint> state_;
  std::vector<int32_t> accepted_;  // the tokens state_ has accepted, in order
};

}  // namespace detllm::engine
