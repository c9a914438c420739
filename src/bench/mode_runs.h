// detllm bench mode runs: the determinism modes to measure, expanded by the verified mode's
// settings (--verify-window, --verify-group-tokens LIST, --verify-group-max-requests). With a
// group-size list, `verified` becomes one labelled run per size — "verified(g=128)" — on the
// same model; every other mode runs once, labelled with its name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "determinism/policy.h"
#include "engine/engine_config.h"

namespace detllm::bench {

// The verified mode's settings from the command line; 0 / empty = the engine's default.
struct VerifyOptions {
  int32_t window = 0;                 // VerifyConfig::window
  std::vector<int32_t> group_tokens;  // one verified run per entry
  int32_t group_max_requests = 0;     // VerifyConfig::group_max_requests

  bool any() const { return window > 0 || !group_tokens.empty() || group_max_requests > 0; }
};

struct ModeRun {
  DeterminismMode mode = DeterminismMode::kInvariant;
  std::string label;         // the report's mode column: "fast", "verified(g=128)"
  int32_t group_tokens = 0;  // verified: this run's VerifyConfig::group_tokens; 0 = default
};

// The runs in order: each mode once, verified once per group size (in the list's order).
// Throws detllm::Error when verify settings are given without the verified mode, when a group
// size repeats, or when the settings do not make a valid VerifyConfig (checked here, before
// any model is loaded).
std::vector<ModeRun> plan_mode_runs(const std::vector<DeterminismMode>& modes,
                                    const VerifyOptions& verify);

// `base` with the options and the run's group size applied (only under verified; other modes
// get `base` unchanged). group_min_requests is lowered to group_max_requests when above it.
engine::VerifyConfig verify_config_for(const ModeRun& run, const VerifyOptions& verify,
                                       engine::VerifyConfig base = {});

}  // namespace detllm::bench
