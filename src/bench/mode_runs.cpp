// detllm bench mode runs (mode_runs.h).
#include "bench/mode_runs.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"

namespace detllm::bench {

std::vector<ModeRun> plan_mode_runs(const std::vector<DeterminismMode>& modes,
                                    const VerifyOptions& verify) {
  const bool has_verified =
      std::find(modes.begin(), modes.end(), DeterminismMode::kVerified) != modes.end();
  check(!verify.any() || has_verified,
        "--verify-window, --verify-group-tokens and --verify-group-max-requests set the "
        "verified mode: add verified to --modes (or --mode verified)");
  std::set<int32_t> seen;
  for (int32_t g : verify.group_tokens) {
    check(seen.insert(g).second, "--verify-group-tokens lists {} twice", g);
  }
  std::vector<ModeRun> runs;
  for (DeterminismMode m : modes) {
    const std::string name(determinism_mode_name(m));
    if (m != DeterminismMode::kVerified || verify.group_tokens.empty()) {
      runs.push_back({m, name, 0});
      continue;
    }
    for (int32_t g : verify.group_tokens) {
      runs.push_back({m, fmt::format("{}(g={})", name, g), g});
    }
  }
  for (const ModeRun& r : runs) {
    if (r.mode != DeterminismMode::kVerified) continue;
    try {
      verify_config_for(r, verify).validate();
    } catch (const Error& e) {
      throw_error("{}: {} (see --verify-window, --verify-group-tokens)", r.label, e.what());
    }
  }
  return runs;
}

engine::VerifyConfig verify_config_for(const ModeRun& run, const VerifyOptions& verify,
                                       engine::VerifyConfig base) {
  if (run.mode != DeterminismMode::kVerified) return base;
  if (verify.window > 0) base.window = verify.window;
  if (run.group_tokens > 0) base.group_tokens = run.group_tokens;
  if (verify.group_max_requests > 0) base.set_group_max_requests(verify.group_max_requests);
  return base;
}

}  // namespace detllm::bench
