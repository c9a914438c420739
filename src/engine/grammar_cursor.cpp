// GrammarCursor (see grammar_cursor.h).
#include "engine/grammar_cursor.h"

#include <algorithm>

#include "core/error.h"

namespace detllm::engine {

GrammarCursor::GrammarCursor(std::unique_ptr<structured::TokenConstraint> state)
    : state_(std::move(state)) {
  // At its start: Request::validate checks the request's grammar, fork() copies a cursor.
  check(state_ != nullptr, "engine: internal error: a grammar cursor without a state");
}

GrammarCursor GrammarCursor::fork() const {
  GrammarCursor copy(state_->fork(), accepted_);
  return copy;
}

GrammarCursor::GrammarCursor(std::unique_ptr<structured::TokenConstraint> state,
                             std::vector<int32_t> accepted)
    : state_(std::move(state)), accepted_(std::move(accepted)) {}

bool GrammarCursor::mask_after(std::span<const int32_t> generated, std::span<uint32_t> words) {
  const size_t common = static_cast<size_t>(
      std::mismatch(accepted_.begin(),
                    accepted_.begin() +
                        static_cast<ptrdiff_t>(std::min(accepted_.size(), generated.size())),
                    generated.begin())
          .first -
      accepted_.begin());
  if (common < accepted_.size()) {
    state_->rollback(static_cast<int32_t>(accepted_.size() - common));
    accepted_.resize(common);
  }
  for (size_t i = common; i < generated.size(); ++i) {
    check(state_->accept_token(generated[i]),
          "engine: internal error: the request's grammar does not allow token {} at output "
          "position {}",
          generated[i], i);
    accepted_.push_back(generated[i]);
  }
  return state_->fill_next_token_bitmask(words);
}

}  // namespace detllm::engine
