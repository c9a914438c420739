// A grammar that starts after the reasoning (vLLM's structured outputs with a reasoning
// parser): a thinking model's output is free until it ends its reasoning with the end marker
// (`</think>`, as token ids), and the grammar constrains what follows the first such marker.
// Header-only, like token_constraint.h, so the server builds without the grammar engine.
//
// Two shapes of output, as the server's reasoning parsers split them:
//  - reasoning from the start (deepseek_r1: `<think>` is in the prompt): no open marker;
//  - optional reasoning (qwen3): the output either opens with the open marker (`<think>`) —
//    then reasoning until the end marker, then the grammar — or is under the grammar from its
//    first token. The first token may be the grammar's or the open marker's first id; once the
//    model drew that id (and the grammar does not take it), the rest of the marker is forced.
//
// The contract of TokenConstraint holds: the state is a function of the accepted tokens (the
// phase follows from them, and the inner grammar has accepted exactly the tokens after the
// reasoning); rollback replays the kept tokens from the start, so it returns to that state.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "structured/token_constraint.h"

namespace detllm::structured {

class AfterReasoning final : public TokenConstraint {
 public:
  // inner: at its start; end_marker: the non-empty ids that end the reasoning; open_marker:
  // empty when the output reasons from its start, else the ids that open optional reasoning.
  AfterReasoning(std::unique_ptr<TokenConstraint> inner, std::vector<int32_t> end_marker,
                 std::vector<int32_t> open_marker = {})
      : inner_(std::move(inner)),
        end_(std::move(end_marker)),
        open_(std::move(open_marker)),
        phase_(open_.empty() ? Phase::kReasoning : Phase::kUndecided) {}

  int32_t mask_width() const override { return inner_->mask_width(); }

  bool fill_next_token_bitmask(std::span<uint32_t> words) override {
    switch (phase_) {
      case Phase::kGrammar:
        return inner_->fill_next_token_bitmask(words);
      case Phase::kUndecided: {
        inner_->fill_next_token_bitmask(words);
        allow(words, open_[0]);
        return true;
      }
      case Phase::kOpening:
        std::fill(words.begin(), words.end(), 0u);
        allow(words, open_[opened_]);
        return true;
      case Phase::kReasoning:
        break;
    }
    const int32_t width = mask_width();  // every id of the vocabulary while reasoning
    std::fill(words.begin(), words.end(), ~0u);
    if (const int32_t rest = width % 32) words[static_cast<size_t>(width / 32)] = (1u << rest) - 1;
    return width > 0;
  }

  bool accept_token(int32_t id) override {
    if (id < 0 || id >= mask_width()) return false;
    switch (phase_) {
      case Phase::kGrammar:
        if (!inner_->accept_token(id)) return false;
        break;
      case Phase::kUndecided:
        if (inner_->accept_token(id)) {
          phase_ = Phase::kGrammar;
        } else if (id == open_[0]) {
          opened_ = 1;
          phase_ = opened_ == open_.size() ? Phase::kReasoning : Phase::kOpening;
        } else {
          return false;
        }
        break;
      case Phase::kOpening:
        if (id != open_[opened_]) return false;
        if (++opened_ == open_.size()) phase_ = Phase::kReasoning;
        break;
      case Phase::kReasoning:
        tokens_.push_back(id);
        if (tokens_.size() >= end_.size() &&
            std::equal(end_.begin(), end_.end(),
                       tokens_.end() - static_cast<ptrdiff_t>(end_.size()))) {
          phase_ = Phase::kGrammar;
        }
        return true;
    }
    tokens_.push_back(id);
    return true;
  }

  void rollback(int32_t n) override {
    std::vector<int32_t> kept(tokens_.begin(), tokens_.end() - n);
    inner_->rollback(inner_->n_accepted());
    tokens_.clear();
    opened_ = 0;
    phase_ = open_.empty() ? Phase::kReasoning : Phase::kUndecided;
    for (int32_t t : kept) accept_token(t);
  }

  int32_t n_accepted() const override { return static_cast<int32_t>(tokens_.size()); }
  bool is_terminated() const override {
    return phase_ == Phase::kGrammar && inner_->is_terminated();
  }

  std::unique_ptr<TokenConstraint> fork() const override {
    auto copy = std::make_unique<AfterReasoning>(inner_->fork(), end_, open_);
    copy->tokens_ = tokens_;
    copy->opened_ = opened_;
    copy->phase_ = phase_;
    return copy;
  }

  // Where the last `marker` in `ids` ends (ids.size() past it), or nullopt without one: the
  // server asks whether the prompt's template closed the reasoning already (Qwen3 with
  // enable_thinking false ends its prompt with `</think>` and blank lines).
  static std::optional<size_t> end_of_last(std::span<const int32_t> ids,
                                           std::span<const int32_t> marker) {
    if (marker.empty()) return std::nullopt;
    const auto at = std::find_end(ids.begin(), ids.end(), marker.begin(), marker.end());
    if (at == ids.end()) return std::nullopt;
    return static_cast<size_t>(at - ids.begin()) + marker.size();
  }

 private:
  enum class Phase : uint8_t {
    kUndecided,  // before the first token, with an open marker: the grammar's or the marker's
    kOpening,    // inside the open marker (forced)
    kReasoning,  // free, until the end marker
    kGrammar,    // the inner grammar
  };

  static void allow(std::span<uint32_t> words, int32_t id) {
    words[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
  }

  std::unique_ptr<TokenConstraint> inner_;
  std::vector<int32_t> end_;
  std::vector<int32_t> open_;
  std::vector<int32_t> tokens_;  // every accepted token
  size_t opened_ = 0;            // ids of the open marker accepted
  Phase phase_;
};

}  // namespace detllm::structured
