// detllm bench mode runs (src/bench/mode_runs.h): --verify-group-tokens expands the verified
// mode into one labelled run per group size; the verify settings reach VerifyConfig; bad
// settings are refused before any model is loaded.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/mode_runs.h"
#include "core/error.h"

namespace detllm::bench {
namespace {

std::vector<std::string> labels(const std::vector<ModeRun>& runs) {
  std::vector<std::string> out;
  for (const ModeRun& r : runs) out.push_back(r.label);
  return out;
}

TEST(BenchModeRuns, EachModeOnceWithoutVerifySettings) {
  const std::vector<ModeRun> runs =
      plan_mode_runs({DeterminismMode::kFast, DeterminismMode::kVerified}, {});
  EXPECT_EQ(labels(runs), (std::vector<std::string>{"fast", "verified"}));
  EXPECT_EQ(runs[1].group_tokens, 0);
  const engine::VerifyConfig v = verify_config_for(runs[1], {});
  EXPECT_EQ(v.group_tokens, engine::VerifyConfig{}.group_tokens);
}

TEST(BenchModeRuns, VerifiedOncePerGroupSizeOthersOnce) {
  VerifyOptions v;
  v.group_tokens = {64, 128, 256, 512};
  v.window = 8;
  v.group_max_requests = 2;
  const std::vector<ModeRun> runs = plan_mode_runs(
      {DeterminismMode::kFast, DeterminismMode::kVerified, DeterminismMode::kInvariant}, v);
  EXPECT_EQ(labels(runs),
            (std::vector<std::string>{"fast", "verified(g=64)", "verified(g=128)",
                                      "verified(g=256)", "verified(g=512)", "invariant"}));
  for (size_t i = 1; i <= 4; ++i) {
    EXPECT_EQ(runs[i].mode, DeterminismMode::kVerified);
    const engine::VerifyConfig c = verify_config_for(runs[i], v);
    EXPECT_EQ(c.group_tokens, v.group_tokens[i - 1]);
    EXPECT_EQ(c.window, 8);
    EXPECT_EQ(c.group_max_requests, 2);
    EXPECT_EQ(c.group_min_requests, 2);  // lowered from the default 4
    EXPECT_EQ(c.max_wait_steps, engine::VerifyConfig{}.max_wait_steps);
    EXPECT_NO_THROW(c.validate());
  }
  // Other modes keep the base settings.
  engine::VerifyConfig base;
  base.window = 3;
  EXPECT_EQ(verify_config_for(runs[0], v, base).window, 3);
  EXPECT_EQ(verify_config_for(runs[5], v, base).group_tokens, base.group_tokens);
}

TEST(BenchModeRuns, ABigGroupMaxKeepsTheMinimum) {
  VerifyOptions v;
  v.group_max_requests = 32;
  const std::vector<ModeRun> runs = plan_mode_runs({DeterminismMode::kVerified}, v);
  EXPECT_EQ(labels(runs), (std::vector<std::string>{"verified"}));
  const engine::VerifyConfig c = verify_config_for(runs[0], v);
  EXPECT_EQ(c.group_max_requests, 32);
  EXPECT_EQ(c.group_min_requests, engine::VerifyConfig{}.group_min_requests);
}

void expect_refused(const std::vector<DeterminismMode>& modes, const VerifyOptions& v,
                    const std::string& part) {
  try {
    (void)plan_mode_runs(modes, v);
    ADD_FAILURE() << "accepted; expected: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(BenchModeRuns, BadSettingsAreRefused) {
  VerifyOptions groups;
  groups.group_tokens = {64};
  expect_refused({DeterminismMode::kFast}, groups, "add verified to --modes");
  VerifyOptions window;
  window.window = 4;
  expect_refused({DeterminismMode::kInvariant}, window, "add verified to --modes");
  VerifyOptions twice;
  twice.group_tokens = {64, 128, 64};
  expect_refused({DeterminismMode::kVerified}, twice, "lists 64 twice");
  VerifyOptions small;  // a group must hold one window (window + 1 rows)
  small.window = 16;
  small.group_tokens = {256, 16};
  expect_refused({DeterminismMode::kVerified}, small, "verified(g=16)");
}

}  // namespace
}  // namespace detllm::bench
