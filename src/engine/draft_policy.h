// The adaptive draft length and off-switch of speculative decoding, per sample
// (SpeculativeConfig::adaptive, docs/speculative.md). Host policy over the schedule: it only
// decides how many drafts a window asks for, and every emitted token is still the target's
// own draw (draft_verdict.h), so it changes no bit.
//
// Cost model, in units of one plain decode step of the target (one row): a window of p drafts
// costs 1 + row_cost·p (the verification step's extra rows) + draft_cost·p (p draft-model
// forwards; 0 for the n-gram lookup) and emits a + 1 tokens (a accepted, plus the draw after
// them). Plain decoding emits 1 token per unit, so the window's efficiency is
//   e = (a + 1) / (1 + (row_cost + draft_cost) · p),
// above 1 where it paid. Rule, after each finished window (K = num_speculative_tokens):
//   length    every draft accepted (a == p): k = min(K, k + 1); else k = max(1, a + 1) — the
//             next window asks for one more than this one kept.
//   off       eff = (eff + e) / 2 (from 1). Once kMinWindows windows have run and eff < 1,
//             drafting pauses for kBackoffTokens generated tokens, then one probe window of one
//             draft (eff reset to 1: a probe that does not pay pauses again); each further
//             pause doubles, up to kMaxBackoffTokens, until a window pays.
#pragma once

#include <algorithm>
#include <cstdint>

namespace detllm::engine {

// A verification row's cost beside a one-row step on the CPU backend: a window step of up to
// 6 rows measured 1.8–2× a one-row step (docs/speculative.md, "Measured"). A device decode step
// is bound by reading the weights, where extra rows cost less: 0.2 is conservative there.
inline constexpr double kVerifyRowCost = 0.2;

class DraftPolicy {
 public:
  static constexpr int32_t kMinWindows = 2;
  static constexpr int32_t kBackoffTokens = 16;
  static constexpr int32_t kMaxBackoffTokens = 256;

  // k_max: the configured K; adaptive false: always k_max, never paused. draft_cost: one
  // draft's cost in target decode steps (0 for the n-gram lookup).
  DraftPolicy(int32_t k_max = 1, bool adaptive = false, double draft_cost = 0.0,
              double row_cost = kVerifyRowCost)
      : k_max_(k_max), adaptive_(adaptive), per_draft_(row_cost + draft_cost), k_(k_max) {}

  // Drafts the next window may ask for with `generated` tokens generated so far: 0 while paused.
  int32_t draft_length(int32_t generated) const { return generated < off_until_ ? 0 : k_; }
  // A window of `proposed` drafts (>= 1) finished with `accepted` of them kept, `generated`
  // tokens generated after it.
  void on_window(int32_t proposed, int32_t accepted, int32_t generated);
  int32_t n_pauses() const { return n_pauses_; }

 private:
  int32_t k_max_;
  bool adaptive_;
  double per_draft_;  // row_cost + draft_cost
  int32_t k_;
  double eff_ = 1.0;
  int32_t windows_ = 0;
  int32_t off_until_ = 0;  // generated tokens before which nothing is drafted
  int32_t backoff_ = kBackoffTokens;
  int32_t n_pauses_ = 0;
};

inline void DraftPolicy::on_window(int32_t proposed, int32_t accepted, int32_t generated) {
  if (!adaptive_ || proposed <= 0) return;
  k_ = accepted >= proposed ? std::min(k_max_, k_ + 1) : std::max(1, accepted + 1);
  const double e = (accepted + 1) / (1.0 + per_draft_ * proposed);
  eff_ = (eff_ + e) / 2;
  ++windows_;
  if (windows_ >= kMinWindows && eff_ < 1.0) {
    off_until_ = generated + backoff_;
    backoff_ = std::min(kMaxBackoffTokens, 2 * backoff_);
    ++n_pauses_;
    k_ = 1;  // the probe
    eff_ = 1.0;
  } else if (e >= 1.0) {
    backoff_ = kBackoffTokens;
  }
}

}  // namespace detllm::engine
