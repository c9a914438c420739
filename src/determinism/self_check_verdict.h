// The startup self-check's verdict (design.md Rule 3): what the engine, the server and
// /metrics need to know about it — passed, failed (deterministic requests refused, with the
// message a refused request gets), disabled or not run. The check itself is verify/self_check.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace detllm {

struct SelfCheckReport;  // verify/self_check.h

enum class SelfCheckState : uint8_t {
  kNotRun,  // nobody ran it (library use, tests): gates nothing
  kPassed,
  kFailed,    // deterministic requests are refused
  kDisabled,  // DeterminismPolicy::self_check is off (--no-self-check)
};
// "not_run", "passed", "failed", "disabled" (the /metrics label).
std::string_view self_check_state_name(SelfCheckState state);

struct SelfCheckVerdict {
  SelfCheckState state = SelfCheckState::kNotRun;
  std::string failure;  // kFailed: the first failing check, one line

  static SelfCheckVerdict of(const SelfCheckReport& report);
  static SelfCheckVerdict disabled() { return {SelfCheckState::kDisabled, {}}; }
  bool refuses_deterministic() const { return state == SelfCheckState::kFailed; }
  // The error a refused deterministic request gets: what failed and what to do.
  std::string refusal_message() const;
};

}  // namespace detllm
